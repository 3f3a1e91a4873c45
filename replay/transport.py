"""The one place where replay makes ZeroMQ sockets and sends multipart messages.

Every socket gets LINGER and both high-water marks on purpose, so transport settings
(and, later, transport security) change in one spot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import zmq

# Frames at least this large travel without a copy (ZeroMQ keeps a reference until sent);
# smaller ones are copied, which is cheaper than wrapping them for zero-copy. This is
# pyzmq's own default threshold for copy=False sends.
ZERO_COPY_MIN_BYTES = 65536


def make_socket(context: zmq.Context, kind: int, hwm: int, linger_ms: int = 0) -> zmq.Socket:
    """A socket with LINGER and both high-water marks set."""
    socket = context.socket(kind)
    socket.setsockopt(zmq.LINGER, linger_ms)
    socket.setsockopt(zmq.SNDHWM, hwm)
    socket.setsockopt(zmq.RCVHWM, hwm)
    return socket


def send_frames(socket: zmq.Socket, frames: Sequence[object], flags: int = 0) -> None:
    """Sends one multipart message, choosing copy or zero-copy per frame by size.

    Raises:
        zmq.Again: with ``zmq.NOBLOCK`` in ``flags``, if the message cannot be queued now
            (ZeroMQ queues a multipart message whole or not at all).
    """
    last = len(frames) - 1
    for position, frame in enumerate(frames):
        nbytes = frame.nbytes if isinstance(frame, (np.ndarray, memoryview)) else len(frame)
        more = zmq.SNDMORE if position < last else 0
        socket.send(frame, flags | more, copy=nbytes < ZERO_COPY_MIN_BYTES)


def bind(socket: zmq.Socket, host: str, port: int) -> str:
    """Binds to ``tcp://host:port`` (a free port when 0) and returns the bound endpoint."""
    if port:
        socket.bind(f"tcp://{host}:{port}")
    else:
        socket.bind_to_random_port(f"tcp://{host}")
    return socket.getsockopt_string(zmq.LAST_ENDPOINT)
