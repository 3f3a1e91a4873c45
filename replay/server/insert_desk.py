"""A shard's side of inserts: its PULL socket drained each round, every message counted
under its sender and admitted on its lane (``replay.server.lanes``), credit answered, and
the round's messages stored (``replay.server.ingest``).

Messages of whole transitions are stored together at the end of the round, in one write
per layout (``Ingest.take_group``); the rest one by one in their turn. Only a message's
header is read on the way in; its arrays are read when it is stored, and a refused one is
counted under its sender and changes nothing stored.
"""

from __future__ import annotations

from collections.abc import Callable

import zmq

from replay.errors import ProtocolError, ReplayError
from replay.server.credit_desk import CreditDesk
from replay.server.ingest import Ingest
from replay.server.lanes import Verdict, admit
from replay.server.rate_limiter import QueueLimiter, RateLimiter
from replay.server.senders import (
    REJECT_INSERT,
    REJECT_PROTOCOL,
    REJECT_UNEXPECTED_KIND,
    SenderBook,
    SenderStats,
    claimed_sender,
)
from replay.wire.layout import Header, Kind, decode, read_header
from replay.wire.security import peer_id
from replay.wire.transport import recv_frames

Taken = tuple[Header, list, SenderStats]


class InsertDesk:
    """Drains a shard's PULL socket, at most ``max_per_round`` messages a round.

    Args:
        pull: the shard's PULL socket.
        max_per_round: messages a round takes at most (the learner's requests wait no
            longer than that).
        senders: the shard's per-sender counters.
        credit: the shard's credit desk, told of each message taken.
        limiter: the shard's limiter, told of what is stored.
        may_insert: ``may_insert(pending)``, whether the shard takes another message with
            ``pending`` transitions taken this round: its limiter's word, lifted at a stop
            (``ShardServer.may_insert``). A round stops when it says no.
        ingest: the shard's store and its way in (asked each round: a restore replaces it).
    """

    def __init__(
        self,
        pull: zmq.Socket,
        max_per_round: int,
        senders: SenderBook,
        credit: CreditDesk,
        limiter: QueueLimiter | RateLimiter,
        may_insert: Callable[[int], bool],
        ingest: Callable[[], Ingest],
    ) -> None:
        self._pull = pull
        self._max_per_round = max_per_round
        self._senders = senders
        self._credit = credit
        self._limiter = limiter
        self._may_insert = may_insert
        self._ingest = ingest

    def drain(self) -> int:
        """Takes what is queued, up to a round's worth, and stores it; the messages read."""
        ingest = self._ingest()
        group: list[Taken] = []
        pending = read = 0
        for _ in range(self._max_per_round):
            if not self._may_insert(pending):
                break
            try:
                frames = recv_frames(self._pull)
            except zmq.Again:
                break
            read += 1
            taken = self._admit(frames)
            if taken is None:
                continue
            if ingest.groups(taken[0]):
                group.append(taken)
                pending += taken[0].count
            else:
                self._store(ingest, group)
                group, pending = [], 0
                self._store(ingest, [taken])
        self._store(ingest, group)
        return read

    def _admit(self, frames: list) -> Taken | None:
        """Reads and counts one insert message's header; returns it, the frames and its
        sender's counters if it is to be stored (None: refused, or a duplicate or gap
        on its lane). Its arrays are read when it is stored."""
        try:
            header = read_header(frames[0])
        except ProtocolError as exc:
            sender = self._senders.known(claimed_sender(frames[0]))
            self._senders.get(sender).taken += 1
            self._senders.reject(sender, REJECT_PROTOCOL, exc)
            return None
        # Counted under the id the connection may claim (see replay.server.senders).
        sender = self._senders.account(header.sender, lambda: peer_id(frames[0]))
        stats = self._senders.get(sender)
        stats.taken += 1
        stats.taken_bytes += len(frames[0]) if len(frames) == 1 else sum(map(len, frames))
        if header.kind not in (Kind.INSERT, Kind.INSERT_FRAMES):
            self._senders.reject(sender, REJECT_UNEXPECTED_KIND, f"{header.kind.name} on PULL")
            return None
        verdict = admit(
            self._senders.tracked(sender), header.incarnation, header.sequence, header.held
        )
        # Answered now, not when the round's messages are stored: a lone sender's
        # next answer would otherwise wait up to a whole round.
        self._credit.taken(sender)
        if verdict != Verdict.TAKE:
            return None
        if sender != header.sender:  # refusals are counted under the same id
            header = header._replace(sender=sender)
        return header, frames, stats

    def _store(self, ingest: Ingest, group: list[Taken]) -> None:
        if not group:
            return
        if len(group) == 1 and not ingest.groups(group[0][0]):
            try:
                outcomes: list[int | ReplayError] = [ingest.take(decode(group[0][1]))]
            except ReplayError as exc:  # ProtocolError included
                outcomes = [exc]
        else:
            outcomes = ingest.take_group([(header, frames) for header, frames, _ in group])
        for (header, _, stats), added in zip(group, outcomes, strict=True):
            if isinstance(added, ReplayError):
                self._senders.reject(header.sender, REJECT_INSERT, added)
                continue
            self._limiter.record_insert(added)
            stats.inserts += 1
            stats.transitions += added
            stats.last_sequence = header.sequence
            if header.policy_version >= 0:
                version = header.policy_version
                low, high = stats.policy_version_min, stats.policy_version_max
                stats.policy_version_min = version if low is None else min(low, version)
                stats.policy_version_max = version if high is None else max(high, version)
