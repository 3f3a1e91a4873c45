"""Clients of replay shards: requests to one shard, and the actors' insert client.

Every blocking wait goes through a poller with a timeout and raises
:class:`ReplayTimeout` when it runs out; nothing blocks forever on a dead shard.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import zmq

from replay.errors import ProtocolError, ReplayError
from replay.spec import TransitionSpec
from replay.transport import insert_buffer_bytes, make_socket, send_frames
from replay.wire import Kind, Message, array_text, decode, encode, spec_from_array

logger = logging.getLogger(__name__)

# While shards start, a spec request is asked again this often.
SPEC_RETRY_S = 2.0


class ReplayTimeout(ReplayError):
    """A shard did not answer, or accept data, within the timeout."""


class ShardError(ReplayError):
    """A shard answered a request with an ERROR message."""


class SpecMismatchError(ReplayError, ValueError):
    """A shard stores different fields than the client was configured for."""


@dataclass(frozen=True)
class ShardEndpoints:
    """Where one shard listens: ``insert`` (PULL) and ``request`` (ROUTER)."""

    insert: str
    request: str


class RequestClient:
    """A DEALER connected to one shard's ROUTER, for SPEC, INFO, SAMPLE and UPDATE.

    Args:
        context: the process's ZeroMQ context.
        endpoint: the shard's request endpoint.
        sender: this process's u32 id.
        timeout_s: how long a request waits for its reply.
        hwm: high-water mark of the socket.
    """

    def __init__(
        self,
        context: zmq.Context,
        endpoint: str,
        sender: int,
        timeout_s: float = 5.0,
        hwm: int = 64,
    ) -> None:
        self.endpoint = endpoint
        self._sender = sender
        self._timeout_ms = int(timeout_s * 1000)
        self._socket = make_socket(context, zmq.DEALER, hwm)
        self._socket.connect(endpoint)
        self._sequence = 0

    def close(self) -> None:
        self._socket.close(linger=0)

    def send(self, kind: Kind, count: int = 0, scalar: float = 0.0, arrays: tuple = ()) -> int:
        """Sends a request without waiting; returns its sequence number.

        Raises:
            ReplayTimeout: the socket's queue stayed full for the timeout.
        """
        sequence = self._sequence
        self._sequence += 1
        frames = encode(Message(kind, self._sender, sequence, -1, count, scalar, arrays))
        if not self._socket.poll(self._timeout_ms, zmq.POLLOUT):
            raise ReplayTimeout(f"{self.endpoint}: could not send {kind.name} in time")
        send_frames(self._socket, frames)
        return sequence

    def receive(self, expected: Kind) -> Message:
        """The next reply, which must be of kind ``expected``.

        Raises:
            ReplayTimeout: no reply within the timeout.
            ShardError: the shard answered with an ERROR.
            ProtocolError: the reply is malformed or of another kind.
        """
        if not self._socket.poll(self._timeout_ms, zmq.POLLIN):
            raise ReplayTimeout(f"{self.endpoint}: no reply within {self._timeout_ms} ms")
        reply = decode(self._socket.recv_multipart(copy=False))
        if reply.kind == Kind.ERROR:
            raise ShardError(f"{self.endpoint}: {array_text(reply.arrays[0])}")
        if reply.kind != expected:
            raise ProtocolError(f"{self.endpoint}: expected {expected.name}, got {reply.kind.name}")
        return reply

    def spec(self) -> TransitionSpec:
        self.send(Kind.SPEC)
        return spec_from_array(self.receive(Kind.SPEC_REPLY).arrays[0])

    def info(self) -> dict[str, object]:
        self.send(Kind.INFO)
        return json.loads(array_text(self.receive(Kind.INFO_REPLY).arrays[0]))

    def sample(self, batch_size: int, beta: float) -> Message:
        """One SAMPLE round trip; arrays as in the wire format's SAMPLE_REPLY."""
        self.send(Kind.SAMPLE, count=batch_size, scalar=beta)
        return self.receive(Kind.SAMPLE_REPLY)

    def update(self, indices: np.ndarray, generations: np.ndarray, priorities: np.ndarray) -> None:
        """Sends new priorities; the shard does not reply (see its INFO counters)."""
        arrays = (
            np.ascontiguousarray(indices, dtype=np.int64),
            np.ascontiguousarray(generations, dtype=np.int64),
            np.ascontiguousarray(priorities, dtype=np.float64),
        )
        self.send(Kind.UPDATE, count=len(arrays[0]), arrays=arrays)


def _await_spec(context: zmq.Context, endpoint: str, sender: int, deadline: float):
    """The shard's spec, asking again every couple of seconds until ``deadline``."""
    while True:
        wait_s = min(SPEC_RETRY_S, max(deadline - time.monotonic(), 0.05))
        requests = RequestClient(context, endpoint, sender, wait_s)
        try:
            return requests.spec()
        except ReplayTimeout:
            if time.monotonic() >= deadline:
                raise
            logger.info("shard at %s does not answer yet; asking again", endpoint)
        finally:
            requests.close()


class ShardCredit:
    """How many of one client's batches a shard has not taken in yet.

    High-water marks count messages in ZeroMQ's queues, but the kernel's socket buffers
    (128 KiB or more each side, see ``replay.transport``) hold thousands of small batches
    beyond them. With many actors and shards, that is hundreds of thousands of transitions
    made by an old policy, out of the rate limiter's reach, and actors that burn the cores
    making them. So the client counts what it sent and asks the shard (RECEIVED, on its own
    DEALER) how many it has taken; the shard holds the answer until enough are taken.

    Args:
        limit: batches this client may have sent and not yet seen taken.
    """

    def __init__(self, context: zmq.Context, endpoint: str, sender: int, limit: int) -> None:
        self.endpoint = endpoint
        self.limit = limit
        self.sent = 0
        self.taken = 0.0
        self._sender = sender
        self._sequence = 0
        self._baseline: float | None = None
        self._asked_until: float | None = None
        self.socket = make_socket(context, zmq.DEALER, 16)
        self.socket.connect(endpoint)

    @property
    def in_flight(self) -> float:
        return self.sent - self.taken

    def has_room(self) -> bool:
        return self.in_flight < self.limit

    @property
    def started(self) -> bool:
        return self._baseline is not None

    @property
    def awaiting_reply(self) -> bool:
        """A question is out (or was, and its late answer may still come)."""
        return self._asked_until is not None

    def ask(self, wait_s: float) -> None:
        """Asks the shard to answer once the batches in flight fall to half the limit.

        Does nothing while an earlier question may still be answered.
        """
        now = time.monotonic()
        if self._asked_until is not None and now < self._asked_until:
            return
        wanted = 0.0
        if self._baseline is not None:
            wanted = self._baseline + self.sent - self.limit // 2
        wait_ms = max(0, min(int(wait_s * 1000), 2**32 - 1))
        frames = encode(
            Message(Kind.RECEIVED, self._sender, self._sequence, -1, wait_ms, float(wanted))
        )
        try:
            send_frames(self.socket, frames, zmq.NOBLOCK)
        except zmq.Again:
            return
        self._sequence += 1
        # An answer that has not come a second after the shard's own deadline is lost.
        self._asked_until = now + wait_ms / 1000 + 1.0

    def read_replies(self) -> None:
        """Takes in every answer that has arrived.

        Raises:
            ShardError: the shard answered with an ERROR (it does not know RECEIVED).
        """
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            reply = decode(frames)
            if reply.kind == Kind.ERROR:
                raise ShardError(f"{self.endpoint}: {array_text(reply.arrays[0])}")
            if reply.kind != Kind.RECEIVED_REPLY:
                raise ProtocolError(f"{self.endpoint}: expected RECEIVED_REPLY, got {reply.kind}")
            self._asked_until = None
            if self._baseline is None:
                self._baseline = reply.scalar
            self.taken = max(self.taken, reply.scalar - self._baseline)

    def close(self) -> None:
        self.socket.close(linger=0)


class InsertClient:
    """An actor's connection to every shard: batches go round-robin to shards with room.

    A PUSH socket per shard, each with a high-water mark, so a dead or slow shard costs at
    most ``hwm`` queued batches of memory; a batch goes to the next shard with room, and
    :meth:`insert` raises :class:`ReplayTimeout` only when no shard takes it in time.
    "Room" also means credit: at most ``max_in_flight`` batches sent and not yet taken by
    the shards in all (see :class:`ShardCredit`).

    Args:
        context: the process's ZeroMQ context.
        shards: every shard's endpoints.
        sender: this actor's u32 id.
        spec: the fields this actor sends; checked against every shard at start.
        timeout_s: how long to wait for room to send.
        hwm: batches queued per shard at most.
        batch_hint: transitions per insert, usually; sizes the kernel buffers so that
            back-pressure reaches the sender after about ``hwm`` + 2 batches.
        start_timeout_s: how long to wait for every shard to answer its spec request; the
            shards may still be starting (under Slurm every task starts at once).
        max_in_flight: batches sent and not yet taken by the shards, at most, in all; each
            shard's share is ``ceil(max_in_flight / shards)``. None: only the high-water
            marks and kernel buffers bound it.

    Raises:
        SpecMismatchError: a shard stores other fields (the message shows both specs).
        ReplayTimeout: a shard did not answer the spec request within ``start_timeout_s``.
    """

    def __init__(
        self,
        context: zmq.Context,
        shards: Sequence[ShardEndpoints],
        sender: int,
        spec: TransitionSpec,
        timeout_s: float = 10.0,
        hwm: int = 16,
        start_timeout_s: float = 10.0,
        batch_hint: int = 50,
        max_in_flight: int | None = 16,
    ) -> None:
        if not shards:
            raise ValueError("an insert client needs at least one shard")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")
        deadline = time.monotonic() + start_timeout_s
        for index, shard in enumerate(shards):
            remote = _await_spec(context, shard.request, sender, deadline)
            if remote != spec:
                raise SpecMismatchError(
                    f"shard {index} at {shard.request} stores {remote}, this actor sends {spec}"
                )
        self._spec = spec
        self._sender = sender
        self._timeout_ms = int(timeout_s * 1000)
        self._sockets = []
        for shard in shards:
            socket = make_socket(
                context,
                zmq.PUSH,
                hwm,
                kernel_buffer_bytes=insert_buffer_bytes(batch_hint * spec.item_nbytes),
            )
            socket.connect(shard.insert)
            self._sockets.append(socket)
        self._credits: list[ShardCredit | None] = [None] * len(shards)
        if max_in_flight is not None:
            share = -(-max_in_flight // len(shards))
            self._credits = [ShardCredit(context, shard.request, sender, share) for shard in shards]
            self._start_credits(deadline)
        self._next = 0
        self._sequence = 0

    def _start_credits(self, deadline: float) -> None:
        """Learns each shard's count of this sender's batches before sending any."""
        for credit in list(self._credits):
            credit.ask(0.0)
            while not credit.started and credit in self._credits:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not credit.socket.poll(int(remaining * 1000) + 1):
                    raise ReplayTimeout(f"{credit.endpoint}: no RECEIVED reply in time")
                self._read_credit(credit)

    def close(self, linger_s: float = 1.0) -> None:
        """Closes the sockets, giving batches still queued up to ``linger_s`` to leave."""
        for socket in self._sockets:
            socket.close(linger=int(linger_s * 1000))
        for credit in self._credits:
            if credit is not None:
                credit.close()

    def insert(
        self, batch: Mapping[str, np.ndarray], priorities: np.ndarray, policy_version: int = -1
    ) -> int:
        """Sends one batch to a shard with room; returns that shard's index.

        The arrays are sent without a copy: do not write to them after this call.

        Raises:
            InvalidBatchError: the batch does not match the spec.
            ReplayTimeout: no shard had room within the timeout.
        """
        count = self._spec.check_batch(batch)
        arrays = (
            *(np.ascontiguousarray(batch[name]) for name in self._spec),
            np.ascontiguousarray(priorities, dtype=np.float64),
        )
        frames = encode(
            Message(Kind.INSERT, self._sender, self._sequence, policy_version, count, 0.0, arrays)
        )
        deadline = time.monotonic() + self._timeout_ms / 1000
        for credit in self._credits:
            if credit is not None and credit.awaiting_reply:
                self._read_credit(credit)
        while True:
            for offset in range(len(self._sockets)):
                index = (self._next + offset) % len(self._sockets)
                credit = self._credits[index]
                if credit is not None and not credit.has_room():
                    continue
                try:
                    send_frames(self._sockets[index], frames, zmq.NOBLOCK)
                except zmq.Again:
                    continue
                if credit is not None:
                    credit.sent += 1
                    # Asked ahead, so that the answer is usually back before the credit
                    # runs out: the sender then never stops for a round trip.
                    if credit.in_flight > credit.limit // 2:
                        credit.ask(self._timeout_ms / 1000)
                self._next = index + 1
                self._sequence += 1
                return index
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplayTimeout(f"no shard accepted a batch within {self._timeout_ms} ms")
            self._wait_for_room(remaining)

    def _wait_for_room(self, timeout_s: float) -> None:
        """Waits until a shard may have room: its queue drained, or it took more batches."""
        poller = zmq.Poller()
        for socket, credit in zip(self._sockets, self._credits, strict=True):
            if credit is None or credit.has_room():
                poller.register(socket, zmq.POLLOUT)
            else:
                credit.ask(timeout_s)
                poller.register(credit.socket, zmq.POLLIN)
        ready = dict(poller.poll(int(timeout_s * 1000) + 1))
        for credit in self._credits:
            if credit is not None and credit.socket in ready:
                self._read_credit(credit)

    def _read_credit(self, credit: ShardCredit) -> None:
        try:
            credit.read_replies()
        except ReplayError as exc:
            index = self._credits.index(credit)
            logger.warning("shard %d cannot give credit (%s); not limiting it", index, exc)
            credit.close()
            self._credits[index] = None
