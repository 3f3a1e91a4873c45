"""A shard's side of credit: CREDIT questions held until the asker's lane reaches a number.

An actor asks a shard (CREDIT, on the ROUTER) to answer once the shard expects a given
lane number from it (it has taken every message below; see ``replay.server.lanes`` and
``replay.inserts.lane.ShardCredit``); the answer says the number, whether messages after it
were refused for a gap (send them again), and the shard's incarnation. A question is
answered as soon as the insert that reaches the number is taken, when its wait runs out,
or at once if the number is already reached.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from replay.protocol import messages
from replay.server.lanes import delivered
from replay.server.senders import SenderBook
from replay.wire.layout import Message

# CREDIT questions held at once (about one per actor); more are answered at once.
MAX_HELD_CREDIT_REQUESTS = 4096
# Insert batches the shard lets its active senders have in flight, shared among them; a
# sender is never granted less than its own share (its client's setting). One actor
# alone gets the whole window, so its batches keep coming during a round trip; with many,
# the total in flight stays their shares, as without the window. Counted in bytes, for
# small messages: SHARED_WINDOW batches, or as many as SHARED_WINDOW_BYTES hold of the
# sender's (up to MAX_WINDOW). A lone actor of small batches then needs an answer every
# MAX_WINDOW / 4 of them rather than every 16, which costs it a fifth of its rate.
SHARED_WINDOW = 64
SHARED_WINDOW_BYTES = 1 << 20
MAX_WINDOW = 256
# A sender that asked within this time counts as active.
ACTIVE_S = 5.0


def shared_window(message_nbytes: float) -> int:
    """Insert messages of ``message_nbytes`` each (0: not known yet) a shard lets its
    active senders have in flight in all."""
    if message_nbytes <= 0:
        return SHARED_WINDOW
    return max(SHARED_WINDOW, min(MAX_WINDOW, int(SHARED_WINDOW_BYTES // message_nbytes)))


@dataclass(frozen=True)
class HeldCredit:
    """A CREDIT request held until its sender's insert messages taken reach ``wanted``."""

    identity: bytes
    sender: int
    incarnation: int
    sequence: int
    wanted: float
    deadline: float
    final: bool = False


class CreditDesk:
    """Holds and answers CREDIT questions.

    Args:
        senders: the shard's per-sender counters (``taken`` is what is answered).
        send: ``send(identity, message)`` on the shard's ROUTER.
        shard_index: the shard's index, the sender of the answers.
        widen: grant senders the shared window beyond their own shares. A queue shard
            does not: what waits in flight beyond its queue is policy lag for IMPALA's
            learner, so each sender keeps to its own ``insert_credit`` (a window of 256
            messages of 8 unrolls each let a CartPole learner train on unrolls 242
            versions old).
        limiter_holds: whether the shard's rate limiter refuses inserts now; every
            answer says so, and a lane then does not take the shard's silence about its
            messages for a lost connection (``replay.inserts.lane``).
    """

    def __init__(
        self,
        senders: SenderBook,
        send: Callable[[bytes, Message], None],
        shard_index: int,
        widen: bool = True,
        limiter_holds: Callable[[], bool] = lambda: False,
    ) -> None:
        self._widen = widen
        self._limiter_holds = limiter_holds
        self._senders = senders
        self._send = send
        self._index = shard_index
        self.incarnation = secrets.randbits(32) or 1
        # One held question per sender (a client asks again only once answered).
        self._held: dict[int, HeldCredit] = {}
        self._asked_at: dict[int, float] = {}
        self._pruned_at = time.monotonic()

    def __bool__(self) -> bool:
        return bool(self._held)

    def final_held(self) -> bool:
        """A stopping sender's flush waits on this shard (a held ``final`` question)."""
        return any(held.final for held in self._held.values())

    def ask(self, identity: bytes, message: Message) -> None:
        """Takes a CREDIT question; raises ``ProtocolError`` for a malformed one."""
        request = messages.CreditRequest.from_message(message)
        now = time.monotonic()
        self._forget_quiet(now)
        if len(self._asked_at) < MAX_HELD_CREDIT_REQUESTS or message.sender in self._asked_at:
            self._asked_at[message.sender] = now
        held = HeldCredit(
            identity,
            message.sender,
            message.incarnation,
            message.sequence,
            request.wanted,
            now + request.wait_ms / 1000,
            request.final,
        )
        earlier = self._held.pop(held.sender, None)
        if earlier is not None:
            self._answer(earlier)
        if (
            self._delivered(held) >= held.wanted
            or request.wait_ms == 0
            or len(self._held) >= MAX_HELD_CREDIT_REQUESTS
        ):
            self._answer(held)
        else:
            self._held[held.sender] = held

    def taken(self, sender: int) -> None:
        """Answers ``sender``'s held question if an insert just reached its count: at the
        end of the shard's round (up to ``max_inserts_per_round`` messages later) the
        sender may have stopped for want of credit."""
        held = self._held.get(sender)
        if held is not None and self._delivered(held) >= held.wanted:
            del self._held[sender]
            self._answer(held)

    def _forget_quiet(self, now: float) -> None:
        if now - self._pruned_at >= ACTIVE_S:
            self._pruned_at = now
            self._asked_at = {s: t for s, t in self._asked_at.items() if now - t < ACTIVE_S}

    def window(self, sender: int) -> int:
        """``sender``'s part of the shared window (:func:`shared_window` for its
        messages' mean size), the window divided among the active senders; 0 (the
        sender's own share) where the desk does not widen."""
        if not self._widen:
            return 0
        stats = self._senders.tracked(sender)
        mean_nbytes = stats.taken_bytes / stats.taken if stats is not None and stats.taken else 0
        return shared_window(mean_nbytes) // max(1, len(self._asked_at))

    def expire(self) -> None:
        """Answers the questions whose wait has run out."""
        now = time.monotonic()
        for sender, held in list(self._held.items()):
            if now >= held.deadline:
                del self._held[sender]
                self._answer(held)

    def _delivered(self, held: HeldCredit) -> float:
        """The asker's next lane number here; for an untracked asker, what it wants (it
        is not held back, and has nothing resent)."""
        expected = delivered(self._senders.tracked(held.sender), held.incarnation)
        return held.wanted if expected is None else expected

    def _answer(self, held: HeldCredit) -> None:
        stats = self._senders.tracked(held.sender)
        resend = stats is not None and stats.incarnation == held.incarnation and stats.gap_pending
        if resend:
            stats.gap_pending = 0
        reply = messages.CreditReply(
            self._delivered(held),
            self.incarnation,
            bool(resend),
            self.window(held.sender),
            self._limiter_holds(),
        )
        self._send(held.identity, reply.to_message(self._index, held.sequence))
