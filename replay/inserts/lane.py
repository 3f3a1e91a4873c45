"""An insert client's lane to one shard: its credit there, and the messages it keeps until
the shard confirms them (the protocol is in ``replay.server.lanes``)."""

from __future__ import annotations

import time
from collections import deque

import zmq

from replay.errors import ProtocolError, ReplayError, ShardError
from replay.protocol import messages
from replay.protocol.requests import RequestClient
from replay.wire.layout import Kind, peek_count

STALLED_RESEND_S = 5.0
"""A lane whose shard answers but has taken none of its kept messages for this long sends
them again: the last messages before a broken connection leave no gap behind them for
the shard to see (nothing follows them), so no answer would ever ask for them. Time the
shard's rate limiter held inserts (its answers say so) does not count."""


class ShardCredit:
    """One shard's lane of a client (``replay.server.lanes``): the insert messages it sent there,
    those the shard has confirmed, and a copy of every one not yet confirmed.

    High-water marks count messages in ZeroMQ's queues, but the kernel's socket buffers
    (128 KiB or more each side, see ``replay.wire.transport``) hold thousands of small batches
    beyond them. With many actors and shards, that is hundreds of thousands of transitions
    made by an old policy, out of the rate limiter's reach, and actors that burn the cores
    making them. So the client counts what it sent and asks the shard (CREDIT, on its own
    DEALER) how far it has taken; the shard holds the answer until it has taken enough.
    The same count says which messages to keep for sending again: those past it, at most
    ``limit``, are lost if the shard dies or a connection breaks, and are resent when the
    shard comes back or finds a gap.

    A shard with few senders grants each a wider window than its share (see
    ``replay.server.credit_desk``): one actor alone would otherwise wait a round trip for every
    share of batches, and the shard idle meanwhile.

    A shard that stays silent too long is given up (:meth:`abandon`): the client sends what
    the lane kept to other shards, and the lane starts a new life (a new incarnation) that
    takes nothing until the shard answers again.

    Args:
        limit: batches this client may have sent and not yet seen taken, at least.
        incarnation: the client's life (its lanes are numbered anew in each).
    """

    def __init__(
        self, context: zmq.Context, endpoint: str, sender: int, limit: int, incarnation: int
    ) -> None:
        self.endpoint = endpoint
        self.share = limit
        self.limit = limit
        """The share, or the shard's window for this client when it grants more."""
        self.sent = 0
        """The next lane number."""
        self.taken = 0
        """Lane numbers below this are confirmed; the rest are kept in ``retained``."""
        self.retained: deque[list] = deque()
        self._retained_counts: deque[int] = deque()  # transitions of each, beside it
        self.retained_transitions = 0
        self.resend_at: int | None = None
        """Lane number from which ``retained`` must be sent again, None if none."""
        self.resent = 0
        self._asked_until: float | None = None
        self._asked_wanted = 0
        self._asked_sequence = -1
        self._asked_final = False
        self._shard_incarnation: int | None = None
        self.restarts_seen = 0
        """Times the shard answered as a new process (it restarted)."""
        self.incarnation = incarnation
        """This lane's life: the client's, or a new one after each :meth:`abandon`."""
        self.abandoned = 0
        """Times this lane was given up for a silent shard."""
        self.gone = False
        """Given up and not heard since: the lane takes nothing new."""
        self._silent_since: float | None = None
        self._progress_at = time.monotonic()
        """When the shard last took one of the kept messages, or the first was sent."""
        self._context, self._sender = context, sender
        self._requests = self._open_requests(incarnation)

    def _open_requests(self, incarnation: int) -> RequestClient:
        return RequestClient(
            self._context, self.endpoint, self._sender, hwm=16, incarnation=incarnation
        )

    @property
    def socket(self) -> zmq.Socket:
        return self._requests.socket

    @property
    def in_flight(self) -> int:
        return self.sent - self.taken

    @property
    def half_full(self) -> bool:
        """Half the limit or more in flight: time to ask how far the shard has taken."""
        return 2 * (self.sent - self.taken) >= self.limit

    @property
    def answer_due(self) -> bool:
        """Worth looking for an answer before a send: the lane is given up (an answer
        brings it back), or three quarters full (it asked at half). Looking costs more
        than a send, so a sender that is not short of credit does not."""
        return self._asked_until is not None and (
            self.gone or 4 * (self.sent - self.taken) >= 3 * self.limit
        )

    def has_room(self) -> bool:
        return self.in_flight < self.limit and self.resend_at is None and not self.gone

    def silent_for(self, now: float) -> float:
        """Seconds since the oldest question the shard has not answered (0: none)."""
        return 0.0 if self._silent_since is None else now - self._silent_since

    @property
    def started(self) -> bool:
        """The shard has answered once (so its incarnation is known)."""
        return self._shard_incarnation is not None

    @property
    def awaiting_reply(self) -> bool:
        """A question is out (or was, and its late answer may still come)."""
        return self._asked_until is not None

    def sent_one(self, frames: list) -> None:
        """Counts a message sent on this lane and keeps it until the shard confirms it."""
        if not self.retained:
            self._progress_at = time.monotonic()
        count = peek_count(frames)
        self.retained.append(frames)
        self._retained_counts.append(count)
        self.retained_transitions += count
        self.sent += 1

    def ask(
        self, wait_s: float, everything: bool = False, room: bool = False, final: bool = False
    ) -> None:
        """Asks the shard to answer once the batches in flight fall to a quarter of the
        limit; with ``room`` (a sender that has none left), once it has taken any more;
        with ``everything``, once they fall to none. ``final``: this sender is stopping,
        and the shard takes its batches past its rate limiter meanwhile
        (``messages.CreditRequest``).

        A question asked at half the limit in flight is then held at the shard while it
        takes a quarter of the limit, and answered while a quarter is still queued: one
        round trip per quarter of the limit, none of which the sender waits for. (Asking
        for less than is already taken is answered at once: a round trip per message or
        two.)

        Does nothing while an earlier question that asks no more may still be answered;
        one that asks more is replaced (the shard answers it at once).
        """
        now = time.monotonic()
        if everything:
            wanted = self.sent
        elif room:
            wanted = self.taken + 1
        else:
            wanted = max(0, self.sent - self.limit // 4)
        out = self._asked_until is not None and now < self._asked_until
        if out and wanted >= self._asked_wanted and final <= self._asked_final:
            return
        wait_ms = max(0, int(wait_s * 1000))
        if self._silent_since is None:
            self._silent_since = now
        sequence = self._requests.send(messages.CreditRequest(wanted, wait_ms, final))
        if sequence is None:
            return
        # An answer that has not come a second after the shard's own deadline is lost.
        self._asked_until = now + wait_ms / 1000 + 1.0
        self._asked_wanted, self._asked_sequence = wanted, sequence
        self._asked_final = final

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
            if reply.sequence == self._asked_sequence:  # else a question since replaced
                self._asked_until = None
            self._silent_since = None
            self.gone = False
            self.limit = max(self.share, answer.window)
            restarted = (
                self._shard_incarnation is not None
                and answer.incarnation != self._shard_incarnation
            )
            self._shard_incarnation = answer.incarnation
            self.restarts_seen += restarted
            taken = min(int(answer.taken), self.sent)
            now = time.monotonic()
            # A shard whose rate limiter holds inserts takes nothing from anyone: that is
            # a wait, not a lost tail, and sending everything kept again would only queue
            # copies behind the originals. The time to stall counts from its release.
            if taken > self.taken or answer.limiter_holds:
                self._progress_at = now
            while self.taken < taken:
                self.retained.popleft()
                self.retained_transitions -= self._retained_counts.popleft()
                self.taken += 1
            stalled = now - self._progress_at >= STALLED_RESEND_S
            if (restarted or answer.resend or stalled) and self.retained:
                # A restarted shard may lack anything it had not snapshotted; one that saw
                # a gap lacks what follows it; one that took nothing for long may have
                # lost the tail of a broken connection. Either way: everything kept, in
                # order (what it already has, it drops as duplicates).
                self.resend_at = self.taken
                self._progress_at = now

    def held_by_limiter(self) -> bool:
        """Whether the shard's rate limiter refuses inserts now (its INFO's
        ``inserts_waiting``): it takes nothing more until someone samples. False when it
        cannot say (an older or a busy shard): then the caller waits as before."""
        try:
            return bool(self._requests.info().get("inserts_waiting"))
        except ReplayError:
            return False

    def abandon(self, incarnation: int) -> list[list]:
        """Gives the lane up: returns the messages it kept (in order, for other shards)
        and starts a life ``incarnation`` at lane number 0, gone until the shard answers.

        Should the shard come back holding some of those messages, they are stored twice;
        a lane that did not start anew would instead refuse every later message as a gap
        (its numbers resume past the ones given away)."""
        kept = list(self.retained)
        self.retained.clear()
        self._retained_counts.clear()
        self.retained_transitions = 0
        self.sent = self.taken = 0
        self.resend_at = self._asked_until = self._silent_since = None
        self.limit = self.share
        self.incarnation = incarnation
        self.abandoned += 1
        self.gone = True
        self._requests.close()  # a late answer belongs to the old life
        self._requests = self._open_requests(incarnation)
        return kept

    def close(self) -> None:
        self._requests.close()
