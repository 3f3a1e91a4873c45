"""Delivery lanes: each insert client numbers its messages to each shard, so a shard takes
each one once and in order, and a client knows which to send again.

A client's life has a random ``incarnation`` (the header field); its messages to one shard
form a *lane* numbered 0, 1, 2, ... (the header's ``sequence``). Each message also says how
many lane numbers just before it the client still holds (the header's ``held``; its
*floor* is the oldest of them): it keeps every message the shard has not confirmed
(``replay.inserts.lane``) and drops the rest.

A shard keeps, per sender, the incarnation it is hearing and the next lane number it
``expected``; CREDIT answers say ``expected`` (for the asker's incarnation) and whether
it refused a message for a gap. The rule (Go-Back-N):

- the number it expected: taken (and stored, or refused for its contents: it is spent);
- a lower one: a duplicate (a resent message the shard already has), dropped;
- a higher one whose floor is above ``expected``: the messages between are ones the
  client has let go after this shard confirmed them, and this shard no longer has them (it
  came back from a snapshot older than its confirmations). They are counted lost and
  ``expected`` jumps to the floor;
- a higher one otherwise: a gap (messages lost in a broken connection's buffers); refused,
  and the next CREDIT answer asks the client to send again from ``expected``.

The last messages a broken connection loses leave no gap behind them (nothing follows
them): a client whose shard answers but has taken none of its kept messages for a while
sends them all again (``replay.inserts.lane.STALLED_RESEND_S``); what the shard has, it
drops as duplicates.

So a shard that stays up, or comes back from a snapshot, gets every message of a live
client exactly once; what it loses is only what it had confirmed after its last snapshot,
and that is counted. A shard that never comes back takes what the client holds for it
(at most its credit share) with it; the client reports those as held.

Senders beyond the tracked number (``replay.server.senders``) and messages without an
incarnation (clients without credit) are taken without these checks.
"""

from __future__ import annotations

import enum

from replay.server.senders import SenderStats


class Verdict(enum.IntEnum):
    TAKE = 0
    DUPLICATE = 1
    GAP = 2


def admit(stats: SenderStats | None, incarnation: int, lane: int, held: int) -> Verdict:
    """Whether a shard takes the insert ``lane`` of the client life ``incarnation`` that
    still holds the ``held`` lanes before it; updates ``stats`` (None: an untracked
    sender, always taken)."""
    if stats is None or incarnation == 0:
        return Verdict.TAKE
    if stats.incarnation != incarnation:
        # A restarted client's first messages can meet its predecessor's last ones in
        # the shard's queues: the two lives keep a lane each.
        fresh = (
            (incarnation, 0)
            if stats.previous_incarnation != incarnation
            else (stats.previous_incarnation, stats.previous_expected)
        )
        stats.previous_incarnation, stats.previous_expected = stats.incarnation, stats.expected
        (stats.incarnation, stats.expected), stats.gap_pending = fresh, 0
    if lane < stats.expected:
        stats.duplicates += 1
        return Verdict.DUPLICATE
    floor = lane - held
    if lane > stats.expected and floor > stats.expected:
        stats.lost_at_restart += floor - stats.expected
        stats.expected = floor
    if lane > stats.expected:
        stats.out_of_order += 1
        stats.gap_pending = 1
        return Verdict.GAP
    stats.expected = lane + 1
    return Verdict.TAKE


def delivered(stats: SenderStats | None, incarnation: int) -> int | None:
    """The next lane number the shard expects from the client life ``incarnation``
    (0: it has none of its messages); None for an untracked sender."""
    if stats is None or incarnation == 0:
        return None
    if stats.incarnation == incarnation:
        return stats.expected
    return stats.previous_expected if stats.previous_incarnation == incarnation else 0
