"""The actors' side of replay: the insert client, which sends each batch to a shard with
room and keeps it until that shard confirms it (``replay.inserts.lane``).

Every blocking wait goes through a poller with a timeout and raises
:class:`ReplayTimeout` when it runs out; nothing blocks forever on a dead shard. Requests
(the spec handshake, CREDIT) go through ``replay.protocol.requests``.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import zmq

from replay.errors import ReplayError, ReplayTimeout, SpecMismatchError
from replay.frames.spec import FrameStackSpec
from replay.inserts.endpoints import REROUTE_AFTER_S, ShardEndpoints
from replay.inserts.lane import ShardCredit
from replay.protocol import messages
from replay.protocol.requests import await_spec
from replay.store.spec import TransitionSpec
from replay.wire.layout import encode, peek_count, restamp
from replay.wire.transport import insert_buffer_bytes, make_socket, send_frames

logger = logging.getLogger(__name__)

IDLE_FLUSH_S = 1.0
"""A flush gives up after this long with every shard answering, taking nothing, and held
back by its rate limiter (see :meth:`InsertClient.flush`)."""


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
        reroute_after_s: a shard that leaves a credit question unanswered this long, while
            another shard answers, is given up: the batches kept for it go to the others
            (whole transitions only: frame records need their frames on their shard, so a
            frame batch kept for a shard given up is counted ``abandoned``). None: never.

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
        reroute_after_s: float | None = REROUTE_AFTER_S,
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
        self._encoder = messages.InsertEncoder(spec)
        self._sender = sender
        self._timeout_ms = int(timeout_s * 1000)
        self._reroute_after_s = reroute_after_s
        self._context, self._shards = context, list(shards)
        self._socket_options = (hwm, insert_buffer_bytes(batch_hint * spec.item_nbytes))
        self._sockets = [self._connect(shard) for shard in shards]
        self._orphans: deque[list] = deque()
        """Messages kept for a shard given up, waiting for room on another."""
        self._rerouted = self._abandoned = 0
        self._silence_checked_at = float("-inf")
        self._credits: list[ShardCredit | None] = [None] * len(shards)
        self.incarnation = 0
        """This client's life on the lanes (``replay.server.lanes``), 0 without credit."""
        if credit is not None:
            self.incarnation = secrets.randbits(32) or 1
            share = -(-credit // len(shards))
            self._credits = [
                ShardCredit(context, shard.request, sender, share, self.incarnation)
                for shard in shards
            ]
            self._start_credits(deadline)
        self._next = 0
        self._sequence = 0
        self._stretch_left = 0

    def _connect(self, shard: ShardEndpoints) -> zmq.Socket:
        hwm, buffer_bytes = self._socket_options
        socket = make_socket(self._context, zmq.PUSH, hwm, kernel_buffer_bytes=buffer_bytes)
        socket.connect(shard.insert)
        return socket

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
        frames = self._encoder.encode(
            batch, priorities, self._sender, self._sequence, policy_version
        )
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
        ``apex.acting.frame_writer``). The client stays on one shard for ``stretch`` messages
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
                message = insert.to_message(
                    self.frames, self._sender, self._sequence, policy_version
                )
                built[index] = (insert, encode(message))
            return built[index][1]

        index = self._send(frames_for, stretch)
        return index, built[index][0]

    def _send(self, frames_for: Callable[[int], list], stretch: int) -> int:
        """Sends ``frames_for(index)`` to the first shard with room, starting where the
        last message went if its stretch is not over; returns the index."""
        deadline = time.monotonic() + self._timeout_ms / 1000
        for credit in self._credits:
            if credit is not None and credit.answer_due:
                self._read_credit(credit)
        if self._stretch_left <= 0:
            self._stretch_left = stretch
        while True:
            self._give_up_silent_shards()
            for index, credit in enumerate(self._credits):
                if credit is not None and credit.resend_at is not None:
                    self._resend(index, credit)
            self._send_orphans()
            for offset in range(len(self._sockets)):
                index = (self._next + offset) % len(self._sockets)
                credit = self._credits[index]
                if credit is not None and not credit.has_room():
                    continue
                if not self._send_on_lane(index, frames_for(index), fresh=True):
                    continue
                self._stretch_left = self._stretch_left - 1 if offset == 0 else stretch - 1
                self._next = index if self._stretch_left > 0 else index + 1
                self._sequence += 1
                return index
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplayTimeout(f"no shard accepted a batch within {self._timeout_ms} ms")
            self._wait_for_room(remaining)

    def _send_on_lane(self, index: int, frames: list, fresh: bool = False) -> bool:
        """Sends one message to shard ``index`` now, numbered on its lane; False if its
        socket's queue is full. ``fresh``: frames made for this send, which no socket
        has taken (they may be numbered in place)."""
        credit = self._credits[index]
        if credit is not None:
            frames = restamp(
                frames,
                sequence=credit.sent,
                incarnation=credit.incarnation,
                held=credit.in_flight,
                in_place=fresh,
            )
        try:
            send_frames(self._sockets[index], frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        if credit is not None:
            credit.sent_one(frames)
            # Asked ahead, so that the answer is usually back before the credit runs
            # out: the sender then never stops for a round trip (see ShardCredit.ask).
            if credit.half_full:
                credit.ask(self._timeout_ms / 1000)
        return True

    def _give_up_silent_shards(self) -> None:
        """Gives up the lanes of shards silent past ``reroute_after_s`` while another
        answers (when all are silent, this client is the one cut off: it waits)."""
        now = time.monotonic()
        if self._reroute_after_s is None or now < self._silence_checked_at + 0.5:
            return  # twice a second is plenty against a timeout of seconds
        self._silence_checked_at = now
        credits = [credit for credit in self._credits if credit is not None]
        silent = [c for c in credits if c.silent_for(now) > self._reroute_after_s]
        if not silent or len(silent) == len(credits):
            return
        for credit in silent:
            if credit.gone:
                continue
            index = self._credits.index(credit)
            kept = credit.abandon(secrets.randbits(32) or 1)
            # Its queue goes too: those messages belong to the lane's old life.
            self._sockets[index].close(linger=0)
            self._sockets[index] = self._connect(self._shards[index])
            if self.frames is None:
                self._orphans.extend(kept)
            else:
                self._abandoned += sum(peek_count(frames) for frames in kept)
            logger.warning(
                "shard %d silent for %.0f s: giving it up; %d batches go elsewhere",
                index,
                self._reroute_after_s,
                len(kept),
            )
        for credit in credits:
            if credit.gone:
                credit.ask(self._timeout_ms / 1000)  # answers when it is back

    def _send_orphans(self) -> None:
        """Sends the messages of given-up shards to shards with room, as far as they
        take them now."""
        while self._orphans:
            for index, credit in enumerate(self._credits):
                sendable = credit is not None and credit.has_room()
                if sendable and self._send_on_lane(index, self._orphans[0]):
                    self._orphans.popleft()
                    self._rerouted += 1
                    break
            else:
                return

    def _resend(self, index: int, credit: ShardCredit) -> None:
        """Sends the kept messages from ``credit.resend_at`` again, in order, as far as
        the socket takes them now; the rest wait for the next call."""
        position = max(0, credit.resend_at - credit.taken)
        while position < len(credit.retained):
            frames = restamp(
                credit.retained[position],
                sequence=credit.taken + position,
                incarnation=credit.incarnation,
                held=position,
            )
            try:
                send_frames(self._sockets[index], frames, zmq.NOBLOCK)
            except zmq.Again:
                credit.resend_at = credit.taken + position
                return
            position += 1
            credit.resent += 1
        credit.resend_at = None

    def flush(self, timeout_s: float, final: bool = True) -> bool:
        """Waits until the shards have confirmed every message this client sent, sending
        again what a restarted shard or a broken connection lost; True if they did within
        ``timeout_s`` (always, without credit: nothing is counted then).

        ``final`` (a sender that stops): its questions ask the shards to take its batches
        past their rate limiters, since nothing may sample them again. Without it, or
        with shards older than that flag, it stops early, False, once every shard that
        still holds messages of this client has answered, taken none for
        :data:`IDLE_FLUSH_S`, and says its rate limiter refuses inserts: with nobody
        sampling (a learner that has ended) it would take them at no deadline. What they
        hold is reported in transit, not lost. A shard that takes nothing without its
        limiter saying so (the tail of a broken connection is missing) is waited for, and
        sent the tail again."""
        deadline = time.monotonic() + timeout_s
        progress_at, state = time.monotonic(), None
        while True:
            self._give_up_silent_shards()
            self._send_orphans()
            waiting = [
                (index, credit)
                for index, credit in enumerate(self._credits)
                if credit is not None and (credit.in_flight or credit.gone)
            ]
            done = not self._orphans and not any(credit.in_flight for _, credit in waiting)
            now = time.monotonic()
            remaining = deadline - now
            if done or remaining <= 0:
                return done
            seen = [(c.taken, c.restarts_seen, c.resend_at, c.gone) for _, c in waiting]
            if seen != state:
                progress_at, state = now, seen
            elif now - progress_at >= IDLE_FLUSH_S and self._held_by_limiters(waiting):
                return False
            wait_s = min(remaining, 1.0)
            poller = zmq.Poller()
            for index, credit in waiting:
                if credit.resend_at is not None:
                    self._resend(index, credit)
                credit.ask(wait_s, everything=True, final=final)
                poller.register(credit.socket, zmq.POLLIN)
            ready = dict(poller.poll(int(wait_s * 1000) + 1))
            for _, credit in waiting:
                if credit.socket in ready:
                    self._read_credit(credit)

    @staticmethod
    def _held_by_limiters(waiting: list[tuple[int, ShardCredit]]) -> bool:
        """Every shard holding messages of ours answered its last question and says its
        rate limiter refuses inserts."""
        holding = [credit for _, credit in waiting if credit.in_flight]
        return (
            not any(credit.awaiting_reply or credit.gone for credit in holding)
            and bool(holding)
            and all(credit.held_by_limiter() for credit in holding)
        )

    def delivery(self) -> dict[str, int]:
        """What the lanes hold and did: transitions (and messages) kept unconfirmed,
        messages resent, shard restarts seen, messages rerouted from shards given up, and
        transitions abandoned with them (frame batches, which cannot move)."""
        credits = [credit for credit in self._credits if credit is not None]
        return {
            "unconfirmed": sum(credit.retained_transitions for credit in credits)
            + sum(peek_count(frames) for frames in self._orphans),
            "unconfirmed_messages": sum(len(credit.retained) for credit in credits)
            + len(self._orphans),
            "resent": sum(credit.resent for credit in credits),
            "shard_restarts_seen": sum(credit.restarts_seen for credit in credits),
            "rerouted": self._rerouted,
            "abandoned": self._abandoned,
        }

    def lane_resets(self) -> list[int]:
        """Per shard, the times its lane began anew: the shard restarted, or this client
        gave it up. Either way the shard may lack what it was sent before."""
        return [0 if c is None else c.restarts_seen + c.abandoned for c in self._credits]

    def _wait_for_room(self, timeout_s: float) -> None:
        """Waits until a shard may have room: its queue drained, or it took more batches."""
        poller = zmq.Poller()
        for socket, credit in zip(self._sockets, self._credits, strict=True):
            if credit is None or credit.has_room() or credit.resend_at is not None:
                poller.register(socket, zmq.POLLOUT)
            if credit is not None and not credit.has_room():
                credit.ask(timeout_s, room=True)
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
