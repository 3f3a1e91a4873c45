"""The actors' side of replay: the insert client and its credit with each shard.

Every blocking wait goes through a poller with a timeout and raises
:class:`ReplayTimeout` when it runs out; nothing blocks forever on a dead shard. Requests
(the spec handshake, CREDIT) go through ``replay.requests``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import zmq

from replay import messages
from replay.errors import ProtocolError, ReplayError, ReplayTimeout, ShardError, SpecMismatchError
from replay.frame_spec import FrameStackSpec
from replay.requests import RequestClient, await_spec
from replay.spec import TransitionSpec
from replay.transport import insert_buffer_bytes, make_socket, send_frames
from replay.wire import Kind, encode

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardEndpoints:
    """Where one shard listens: ``insert`` (PULL) and ``request`` (ROUTER)."""

    insert: str
    request: str


class ShardCredit:
    """How many of one client's insert batches a shard has not taken in yet: the credit.

    High-water marks count messages in ZeroMQ's queues, but the kernel's socket buffers
    (128 KiB or more each side, see ``replay.transport``) hold thousands of small batches
    beyond them. With many actors and shards, that is hundreds of thousands of transitions
    made by an old policy, out of the rate limiter's reach, and actors that burn the cores
    making them. So the client counts what it sent and asks the shard (CREDIT, on its own
    DEALER) how many it has taken; the shard holds the answer until enough are taken.

    Args:
        limit: batches this client may have sent and not yet seen taken.
    """

    def __init__(self, context: zmq.Context, endpoint: str, sender: int, limit: int) -> None:
        self.endpoint = endpoint
        self.limit = limit
        self.sent = 0
        self.taken = 0.0
        self._baseline: float | None = None
        self._asked_until: float | None = None
        self._incarnation: int | None = None
        self.restarts_seen = 0
        """Times the shard answered as a new process (it restarted)."""
        self._requests = RequestClient(context, endpoint, sender, hwm=16)

    @property
    def socket(self) -> zmq.Socket:
        return self._requests.socket

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
            wanted = max(0.0, self._baseline + self.sent - self.limit // 2)
        wait_ms = max(0, int(wait_s * 1000))
        if self._requests.send(messages.CreditRequest(wanted, wait_ms)) is None:
            return
        # An answer that has not come a second after the shard's own deadline is lost.
        self._asked_until = now + wait_ms / 1000 + 1.0

    def read_replies(self) -> None:
        """Takes in every answer that has arrived.

        Raises:
            ShardError: the shard answered with an ERROR (it does not know CREDIT).
            ProtocolError: it answered with another kind.
        """
        for reply in self._requests.drain():
            if reply.kind == Kind.ERROR:
                raise ShardError(f"{self.endpoint}: {messages.read_error(reply)}")
            if reply.kind != Kind.CREDIT_REPLY:
                raise ProtocolError(
                    f"{self.endpoint}: expected CREDIT_REPLY, got {reply.kind.name}"
                )
            answer = messages.CreditReply.from_message(reply)
            taken = answer.taken
            self._asked_until = None
            if self._incarnation is not None and answer.incarnation != self._incarnation:
                # A restarted shard counts from what it restored: start the count again.
                self.restarts_seen += 1
                self._baseline, self.sent, self.taken = None, 0, 0.0
            self._incarnation = answer.incarnation
            if self._baseline is None:
                self._baseline = taken
            self.taken = max(self.taken, taken - self._baseline)

    def close(self) -> None:
        self._requests.close()


class InsertClient:
    """An actor's connection to every shard: batches go round-robin to shards with room.

    A PUSH socket per shard, each with a high-water mark, so a dead or slow shard costs at
    most ``hwm`` queued batches of memory; a batch goes to the next shard with room, and
    :meth:`insert` raises :class:`ReplayTimeout` only when no shard takes it in time.
    "Room" also means credit: at most ``credit`` batches sent and not yet taken by the
    shards in all (see :class:`ShardCredit`).

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
        credit: batches sent and not yet taken by the shards, at most, in all; each
            shard's share is ``ceil(credit / shards)``. None: only the high-water marks and
            kernel buffers bound it.

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
        credit: int | None = 16,
    ) -> None:
        if not shards:
            raise ValueError("an insert client needs at least one shard")
        if credit is not None and credit < 1:
            raise ValueError(f"credit must be >= 1 or None, got {credit}")
        deadline = time.monotonic() + start_timeout_s
        layouts = []
        for index, shard in enumerate(shards):
            remote, layout = await_spec(context, shard.request, sender, deadline)
            if remote != spec:
                raise SpecMismatchError(
                    f"shard {index} at {shard.request} stores {remote}, this actor sends {spec}"
                )
            layouts.append(layout)
        if any(layout != layouts[0] for layout in layouts):
            raise SpecMismatchError(f"the shards store frames differently: {layouts}")
        self.frame_layout: dict | None = layouts[0]
        """The shards' frame layout (``{"stack", "compressed"}``), None for whole
        transitions: then :meth:`insert`, else :meth:`insert_frames`."""
        self.frames = FrameStackSpec.from_transition_spec(spec) if layouts[0] else None
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
        if credit is not None:
            share = -(-credit // len(shards))
            self._credits = [ShardCredit(context, shard.request, sender, share) for shard in shards]
            self._start_credits(deadline)
        self._next = 0
        self._sequence = 0
        self._stretch_left = 0

    def _start_credits(self, deadline: float) -> None:
        """Learns each shard's count of this sender's batches before sending any."""
        for credit in list(self._credits):
            credit.ask(0.0)
            while not credit.started and credit in self._credits:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not credit.socket.poll(int(remaining * 1000) + 1):
                    raise ReplayTimeout(f"{credit.endpoint}: no CREDIT_REPLY in time")
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
        self._spec.check_batch(batch)
        message = messages.Insert(batch, priorities).to_message(
            self._spec, self._sender, self._sequence, policy_version
        )
        frames = encode(message)
        return self._send(lambda _index: frames, stretch=1)

    def insert_frames(
        self,
        build: Callable[[int], messages.FrameInsert],
        policy_version: int = -1,
        stretch: int = 16,
    ) -> tuple[int, messages.FrameInsert]:
        """Sends frames and the records that refer to them to one shard with room.

        Each shard must hold every frame its records' stacks reach, so the message depends
        on the shard: ``build(index)`` makes it (the frames that shard lacks, see
        ``apex.frame_writer``). The client stays on one shard for ``stretch`` messages
        when it has room, so a stream's frames are seldom repeated on another shard.

        Returns:
            ``(shard index, the message sent)``.

        Raises:
            ReplayTimeout: no shard had room within the timeout.
        """
        built: dict[int, tuple[messages.FrameInsert, list]] = {}

        def frames_for(index: int) -> list:
            if index not in built:
                insert = build(index)
                message = insert.to_message(self.frames, self._sender, self._sequence,
                                            policy_version)  # fmt: skip
                built[index] = (insert, encode(message))
            return built[index][1]

        index = self._send(frames_for, stretch)
        return index, built[index][0]

    def _send(self, frames_for: Callable[[int], list], stretch: int) -> int:
        """Sends ``frames_for(index)`` to the first shard with room, starting where the
        last message went if its stretch is not over; returns the index."""
        deadline = time.monotonic() + self._timeout_ms / 1000
        for credit in self._credits:
            if credit is not None and credit.awaiting_reply:
                self._read_credit(credit)
        if self._stretch_left <= 0:
            self._stretch_left = stretch
        while True:
            for offset in range(len(self._sockets)):
                index = (self._next + offset) % len(self._sockets)
                credit = self._credits[index]
                if credit is not None and not credit.has_room():
                    continue
                try:
                    send_frames(self._sockets[index], frames_for(index), zmq.NOBLOCK)
                except zmq.Again:
                    continue
                if credit is not None:
                    credit.sent += 1
                    # Asked ahead, so that the answer is usually back before the credit
                    # runs out: the sender then never stops for a round trip.
                    if credit.in_flight > credit.limit // 4:
                        credit.ask(self._timeout_ms / 1000)
                self._stretch_left = self._stretch_left - 1 if offset == 0 else stretch - 1
                self._next = index if self._stretch_left > 0 else index + 1
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
