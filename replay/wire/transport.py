"""The one place where replay makes ZeroMQ sockets and sends multipart messages.

Every socket gets LINGER and both high-water marks on purpose, so transport settings
change in one spot. Security follows the context: a socket of a keyed
``replay.wire.security.RunContext`` becomes a CURVE client when made and a CURVE server
behind the run's ZAP gatekeeper when bound; binding beyond loopback without keys is
refused unless the context allows it (``replay.wire.security.check_exposure``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import zmq

from replay.wire.security import arm_client, arm_server

# Frames at least this large travel without a copy (ZeroMQ keeps a reference until sent);
# smaller ones are copied, which is cheaper than wrapping them for zero-copy. This is
# pyzmq's own default threshold for copy=False sends.
ZERO_COPY_MIN_BYTES = 65536
_SNDMORE, _NOBLOCK = int(zmq.SNDMORE), int(zmq.NOBLOCK)

# Kernel buffers of insert sockets hold about this many messages (and at least
# MIN_KERNEL_BUFFER_BYTES). Left to the kernel, they grow to megabytes (tcp_rmem allows
# 32 MB here): with CartPole's 2.4 KB messages that is tens of thousands of transitions in
# flight behind a rate limiter, tens of seconds old when they land. Bounded, CartPole
# solved in a median 32.7 s instead of 58 s (3 seeds each).
# The floor is two loopback segments (MSS is about 64 KiB on lo): with 64 KiB on both
# ends the receive window often stayed under one segment and the sender waited for the
# 200 ms+ zero-window probe (ingest windows of 0.2 s dropped to 3% of the median); at
# 16 KiB ingest fell to ~50 messages/s. With 128 KiB no window stalled in 8 quick runs.
KERNEL_BUFFER_MESSAGES = 2
MIN_KERNEL_BUFFER_BYTES = 131072
# Above this, a fixed buffer may be capped by net.core.wmem_max (212992 on many kernels),
# below what the kernel's own tuning gives; and its few-megabyte buffers hold only a couple
# of such large messages anyway.
MAX_KERNEL_BUFFER_BYTES = 262144


# ZMTP heartbeats only on request sockets (DEALER), sent by the connecting side. A link
# that goes down leaves TCP connections open and their retransmissions backing off (past
# 20 s after a 30 s cut: the learner waited 25 s after the link came back, measured on the
# namespace hosts). A connection silent for HEARTBEAT_TIMEOUT_MS is dropped instead, and
# ZeroMQ connects anew; a connect that hangs is given up after CONNECT_TIMEOUT_MS and tried
# again, so the first attempt after the link is back succeeds. What a dropped connection
# held is sent again (``replay.server.lanes``).
# Nowhere else: libzmq 4.3.5 aborts the process (``Assertion failed: !_io_error``,
# stream_engine_base.cpp:310) when a connection whose reader has stopped reading (its
# high-water mark reached: a shard whose rate limiter holds inserts, an actor's weights
# SUB between polls) loses its peer and then has a ping to send: its own heartbeat timer,
# or the answer to a ping it read before it stopped (libzmq issue 4364). A shard died so
# when an actor left while the shard held inserts. So PUSH, PULL, PUB and SUB connections
# carry no pings, and a bound socket never pings; every socket instead has TCP keepalive,
# which the kernel runs whatever the reader does: an idle connection whose peer is gone
# is dropped after KEEPALIVE_IDLE_S + KEEPALIVE_COUNT * KEEPALIVE_INTERVAL_S (the bound
# side, which only lets go of vanished peers, after the slower BOUND_ figures). A PUSH
# with batches in flight over a cut link waits for TCP's retransmission instead; its lane
# already resends what the shard did not confirm. Heartbeats cost per connection: with
# pings both ways every second, 512 idle actors cost 4 shards 0.35 cores.
# (A peer's TTL alone did not make libzmq 4.3.5 drop a frozen peer, measured.)
HEARTBEAT_KINDS = frozenset({zmq.DEALER})
HEARTBEAT_IVL_MS = 2000
HEARTBEAT_TIMEOUT_MS = 6000
KEEPALIVE_IDLE_S = 2
KEEPALIVE_INTERVAL_S = 1
KEEPALIVE_COUNT = 4
BOUND_KEEPALIVE_IDLE_S = 15
BOUND_KEEPALIVE_INTERVAL_S = 5
BOUND_KEEPALIVE_COUNT = 6
CONNECT_TIMEOUT_MS = 2000


def insert_buffer_bytes(message_bytes: int) -> int | None:
    """Kernel buffer size for a socket carrying insert messages of ``message_bytes``
    (None: leave it to the kernel)."""
    wanted = max(MIN_KERNEL_BUFFER_BYTES, KERNEL_BUFFER_MESSAGES * message_bytes)
    return wanted if wanted <= MAX_KERNEL_BUFFER_BYTES else None


def make_socket(
    context: zmq.Context,
    kind: int,
    hwm: int,
    linger_ms: int = 0,
    kernel_buffer_bytes: int | None = None,
) -> zmq.Socket:
    """A socket with LINGER, both high-water marks and TCP keepalive set, and ZMTP
    heartbeats on a request socket (see HEARTBEAT_KINDS).

    ``kernel_buffer_bytes`` fixes the TCP send and receive buffers (else the kernel grows
    them to megabytes). High-water marks count messages, but small messages pile up in
    those kernel buffers by the thousand, out of reach of any back-pressure.
    """
    socket = context.socket(kind)
    socket.setsockopt(zmq.LINGER, linger_ms)
    socket.setsockopt(zmq.SNDHWM, hwm)
    socket.setsockopt(zmq.RCVHWM, hwm)
    if kind in HEARTBEAT_KINDS:
        socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        socket.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
    _keepalive(socket, KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT)
    socket.setsockopt(zmq.CONNECT_TIMEOUT, CONNECT_TIMEOUT_MS)
    if kernel_buffer_bytes is not None:
        socket.setsockopt(zmq.SNDBUF, kernel_buffer_bytes)
        socket.setsockopt(zmq.RCVBUF, kernel_buffer_bytes)
    arm_client(socket)
    return socket


def _keepalive(socket: zmq.Socket, idle_s: int, interval_s: int, count: int) -> None:
    socket.setsockopt(zmq.TCP_KEEPALIVE, 1)
    socket.setsockopt(zmq.TCP_KEEPALIVE_IDLE, idle_s)
    socket.setsockopt(zmq.TCP_KEEPALIVE_INTVL, interval_s)
    socket.setsockopt(zmq.TCP_KEEPALIVE_CNT, count)


def send_frames(socket: zmq.Socket, frames: Sequence[object], flags: int = 0) -> None:
    """Sends one multipart message, choosing copy or zero-copy per frame by size.

    Raises:
        zmq.Again: with ``zmq.NOBLOCK`` in ``flags``, if the message cannot be queued now
            (ZeroMQ queues a multipart message whole or not at all).
    """
    last = len(frames) - 1
    flags = int(flags)  # plain ints: or-ing pyzmq's enum flags costs a microsecond
    for position, frame in enumerate(frames):
        nbytes = frame.nbytes if isinstance(frame, (np.ndarray, memoryview)) else len(frame)
        more = _SNDMORE if position < last else 0
        socket.send(frame, flags | more, copy=nbytes < ZERO_COPY_MIN_BYTES)


def recv_frames(socket: zmq.Socket) -> list[zmq.Frame]:
    """One multipart message now, its frames uncopied (``recv_multipart(NOBLOCK,
    copy=False)`` at half the cost: a frame says whether more follow, where pyzmq asks
    the socket).

    Raises:
        zmq.Again: no message is queued.
    """
    frame = socket.recv(_NOBLOCK, copy=False)
    if not frame.more:
        return [frame]
    frames = [frame]
    while frame.more:  # the rest of a multipart message is there once its first part is
        frame = socket.recv(_NOBLOCK, copy=False)
        frames.append(frame)
    return frames


def bind(socket: zmq.Socket, host: str, port: int) -> str:
    """Binds to ``tcp://host:port`` (a free port when 0) and returns the bound endpoint.
    A bound socket sends no pings of its own (it answers its peers'), and its keepalive
    slows down to the binding side's.

    Raises:
        ConfigError: ``host`` is beyond loopback and the socket's context has no keys
            and does not allow insecure binds (``replay.wire.security.check_exposure``).
        zmq.ZMQError: the port cannot be bound.
    """
    arm_server(socket, host)
    socket.setsockopt(zmq.HEARTBEAT_IVL, 0)
    _keepalive(socket, BOUND_KEEPALIVE_IDLE_S, BOUND_KEEPALIVE_INTERVAL_S, BOUND_KEEPALIVE_COUNT)
    if port:
        socket.bind(f"tcp://{host}:{port}")
    else:
        socket.bind_to_random_port(f"tcp://{host}")
    return socket.getsockopt_string(zmq.LAST_ENDPOINT)
