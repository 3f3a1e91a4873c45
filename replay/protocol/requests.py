"""Requests to one shard: the one DEALER client that every requester uses.

The learner's sampler, the actors' credit, the spec handshake, the benchmarks and the
tests all talk to a shard's ROUTER through :class:`RequestClient`, so numbering, framing,
and what an answer may be are written once. It has a non-blocking side (``send`` returns
None when the queue is full, ``drain`` takes every queued reply) for loops that poll many
shards, and a blocking side (``call``) that waits for the answer to its own request.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
import zmq

from replay.errors import ProtocolError, ReplayTimeout, ShardError, SpecMismatchError
from replay.protocol import messages
from replay.protocol.sample_reply import SampleReply
from replay.store.spec import TransitionSpec
from replay.wire.layout import Kind, Message, decode, encode
from replay.wire.transport import make_socket, send_frames

# Plain ints: pyzmq's enum constants cost a microsecond a use on hot paths.
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
logger = logging.getLogger(__name__)

# While shards start, a spec request is asked again this often.
SPEC_RETRY_S = 2.0


class Request(Protocol):
    """Anything in ``replay.protocol.messages`` that a client sends (SampleRequest, ...)."""

    def to_message(self, sender: int, sequence: int) -> Message:
        """The request as numbered by the client."""


class RequestClient:
    """A DEALER connected to one shard's ROUTER.

    Args:
        context: the process's ZeroMQ context.
        endpoint: the shard's request endpoint.
        sender: this process's u32 id.
        timeout_s: how long a blocking :meth:`call` waits, to send and for its answer.
        hwm: high-water mark of the socket.
        incarnation: this process life's u32 id, put in every request's header (0: none).
    """

    def __init__(
        self,
        context: zmq.Context,
        endpoint: str,
        sender: int,
        timeout_s: float = 5.0,
        hwm: int = 64,
        incarnation: int = 0,
    ) -> None:
        self.endpoint = endpoint
        self.sender = sender
        self.incarnation = incarnation
        self.timeout_s = timeout_s
        self.socket = make_socket(context, zmq.DEALER, hwm)
        self.socket.connect(endpoint)
        self.malformed_replies = 0
        self._sequence = 0

    def close(self) -> None:
        self.socket.close(linger=0)

    def send(self, request: Request | Kind, *, block: bool = False) -> int | None:
        """Sends a request; returns its sequence number, or None if the socket's queue is
        full and ``block`` is False.

        Raises:
            ReplayTimeout: ``block`` and the queue stayed full for ``timeout_s``.
        """
        sequence = self._sequence
        message = (
            messages.request(request, self.sender, sequence)
            if isinstance(request, Kind)
            else request.to_message(self.sender, sequence)
        )
        if self.incarnation:
            message = dataclasses.replace(message, incarnation=self.incarnation)
        frames = encode(message)
        if block and not self.socket.poll(int(self.timeout_s * 1000), zmq.POLLOUT):
            raise ReplayTimeout(f"{self.endpoint}: could not send {message.kind.name} in time")
        try:
            send_frames(self.socket, frames, 0 if block else zmq.NOBLOCK)
        except zmq.Again:
            return None
        self._sequence += 1
        return sequence

    def drain(self) -> list[Message]:
        """Every reply queued now, without waiting. A malformed one is logged and counted
        (``malformed_replies``), never raised: one bad frame must not stop a poll loop."""
        replies = []
        # EVENTS first: a failed non-blocking receive costs an exception, and hot loops
        # (an actor's every insert) ask when nothing has come.
        while self.socket.get(_EVENTS) & _POLLIN:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return replies
            try:
                replies.append(decode(frames))
            except ProtocolError as exc:
                self.malformed_replies += 1
                logger.warning("%s sent a malformed reply: %s", self.endpoint, exc)
        return replies

    def call(self, request: Request | Kind, expected: Kind) -> Message:
        """Sends ``request`` and waits for its answer, which must be of kind ``expected``.
        Answers to earlier requests that arrive first are skipped.

        Raises:
            ReplayTimeout: no answer within ``timeout_s``.
            ShardError: the shard answered with an ERROR.
            ProtocolError: the answer is malformed or of another kind.
        """
        sequence = self.send(request, block=True)
        deadline = time.monotonic() + self.timeout_s
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not self.socket.poll(remaining_ms, zmq.POLLIN):
                raise ReplayTimeout(
                    f"{self.endpoint}: no {expected.name} within {self.timeout_s} s"
                )
            reply = decode(self.socket.recv_multipart(copy=False))
            if reply.sequence != sequence:
                continue
            if reply.kind == Kind.ERROR:
                raise ShardError(f"{self.endpoint}: {messages.read_error(reply)}")
            if reply.kind != expected:
                raise ProtocolError(
                    f"{self.endpoint}: expected {expected.name}, got {reply.kind.name}"
                )
            return reply

    def spec(self) -> TransitionSpec:
        return messages.read_spec(self.call(Kind.SPEC, Kind.SPEC_REPLY))

    def spec_and_frames(self) -> tuple[TransitionSpec, dict | None]:
        """The spec and the frame layout (None: the shard keeps whole transitions)."""
        reply = self.call(Kind.SPEC, Kind.SPEC_REPLY)
        return messages.read_spec(reply), messages.read_frame_layout(reply)

    def info(self) -> dict[str, object]:
        return messages.read_info(self.call(Kind.INFO, Kind.INFO_REPLY))

    def snapshot(self) -> dict[str, object]:
        """Asks the shard for a snapshot now; its INFO counters, ``snapshot_in_progress``
        and ``last_snapshot`` among them, come back at once."""
        return messages.read_info(self.call(Kind.SNAPSHOT, Kind.INFO_REPLY))

    def stop(self) -> dict[str, object]:
        """Asks the shard to stop as it does on SIGTERM (its final snapshot, where it keeps
        them): the run it served has ended. Its INFO counters come back first."""
        return messages.read_info(self.call(Kind.STOP, Kind.INFO_REPLY))

    def sample(self, batch_size: int, beta: float, spec: TransitionSpec) -> SampleReply:
        """One SAMPLE round trip."""
        reply = self.call(messages.SampleRequest(batch_size, beta), Kind.SAMPLE_REPLY)
        return SampleReply.from_message(reply, spec)

    def update(self, indices: np.ndarray, generations: np.ndarray, priorities: np.ndarray) -> None:
        """Sends new priorities; the shard does not reply (see its INFO counters)."""
        self.send(messages.PriorityUpdate(indices, generations, priorities), block=True)


def await_spec(
    context: zmq.Context,
    endpoint: str,
    sender: int,
    deadline: float,
    expected: TransitionSpec | None = None,
    stop_asked: Callable[[], bool] = lambda: False,
) -> tuple[TransitionSpec, dict | None] | None:
    """The shard's spec, asked again every :data:`SPEC_RETRY_S` until ``deadline`` (shards
    may still be starting: under Slurm every task starts at once).

    Returns:
        ``(spec, frame layout)`` (see :meth:`RequestClient.spec_and_frames`), or None if
        ``stop_asked`` turned true first.

    Raises:
        ReplayTimeout: no answer by ``deadline``.
        SpecMismatchError: ``expected`` is given and the shard stores something else.
    """
    while not stop_asked():
        wait_s = min(SPEC_RETRY_S, max(deadline - time.monotonic(), 0.05))
        client = RequestClient(context, endpoint, sender, wait_s)
        try:
            remote, frames = client.spec_and_frames()
        except ReplayTimeout:
            if time.monotonic() >= deadline:
                raise
            logger.info("shard at %s does not answer yet; asking again", endpoint)
            continue
        finally:
            client.close()
        if expected is not None and remote != expected:
            raise SpecMismatchError(f"shard at {endpoint} stores {remote}, expected {expected}")
        return remote, frames
    return None
