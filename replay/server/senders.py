"""A shard's account of who sent what: per-sender counters, rejections by reason, and
logging each kind of rejection once per sender.

Sender ids are whatever a peer claims in its header, so the book does not let claims
alone make entries:

* a message that fails to decode counts against its claimed id only if that id is known
  already (else under ``UNKNOWN_SENDER``): junk cannot create entries;
* a connection (the peer the transport names, ``replay.wire.security.peer_id``) may introduce
  at most ``MAX_SENDERS_PER_PEER`` new ids; its further inventions are pooled. Every
  client of ours sends under one id per connection, and a restarted actor reuses its id,
  which needs no introduction;
* at most ``MAX_TRACKED_SENDERS`` are kept apart in all.

So one hostile connection that invents ids cannot push the real actors' accounting into
the pool, grow the shard's memory, or fill its log.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from replay.errors import SnapshotError

logger = logging.getLogger(__name__)

# Reasons a message is rejected, the keys of the per-sender rejection counters.
REJECT_PROTOCOL = "protocol"
REJECT_INSERT = "insert"
REJECT_UPDATE = "update"
REJECT_REQUEST = "request"
REJECT_UNEXPECTED_KIND = "unexpected_kind"
MAX_TRACKED_SENDERS = 4096
MAX_SENDERS_PER_PEER = 8
UNKNOWN_SENDER = -1


@dataclass
class SenderStats:
    """Counters for one sender id."""

    inserts: int = 0
    taken: int = 0
    taken_bytes: int = 0  # of the insert messages taken: their mean sizes the credit window
    transitions: int = 0
    requests: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    policy_version_min: int | None = None
    policy_version_max: int | None = None
    last_sequence: int | None = None
    # Delivery lanes (``replay.server.lanes``): the client life heard last, the lane number
    # expected next from it, and the same for the life before.
    incarnation: int = 0
    expected: int = 0
    previous_incarnation: int = 0
    previous_expected: int = 0
    gap_pending: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    lost_at_restart: int = 0


class SenderBook:
    """Every sender's :class:`SenderStats` on one shard.

    Args:
        shard_index: named in the log lines.
    """

    def __init__(self, shard_index: int) -> None:
        self._shard_index = shard_index
        self._senders: dict[int, SenderStats] = {}
        self._logged: set[tuple[int, str]] = set()
        # Ids each connection introduced (only connections that introduced one are here,
        # so at most MAX_TRACKED_SENDERS entries).
        self._introduced: dict[str, int] = {}

    def tracked(self, sender: int) -> SenderStats | None:
        """``sender``'s own counters, None if it has none (it is pooled or never seen)."""
        return self._senders.get(sender) if sender != UNKNOWN_SENDER else None

    def account(self, sender: int, peer_of: Callable[[], str]) -> int:
        """The id ``sender``'s messages are counted under from now: its own if it has or
        may get counters (:meth:`get`), else ``UNKNOWN_SENDER``. ``peer_of`` names the
        connection; it is called only for an id without counters (off the hot path)."""
        if self.has(sender):
            return sender
        stats = self.get(sender, peer_of())
        return sender if self._senders.get(sender) is stats else UNKNOWN_SENDER

    def get(self, sender: int, peer: str = "") -> SenderStats:
        """``sender``'s counters, made if ``peer`` (the connection; "" if unknown) may
        still introduce an id; else the pooled ones."""
        stats = self._senders.get(sender)
        if stats is None:
            introduced = self._introduced.get(peer, 0)
            if len(self._senders) >= MAX_TRACKED_SENDERS or (
                peer and introduced >= MAX_SENDERS_PER_PEER
            ):
                sender = UNKNOWN_SENDER
            elif peer:
                self._introduced[peer] = introduced + 1
            stats = self._senders.setdefault(sender, SenderStats())
        return stats

    def has(self, sender: int) -> bool:
        """Whether ``sender`` has counters of its own already."""
        return sender in self._senders and sender != UNKNOWN_SENDER

    def known(self, sender: int) -> int:
        """``sender`` if it has counters already, else ``UNKNOWN_SENDER`` (for what a
        malformed message claims)."""
        return sender if sender in self._senders else UNKNOWN_SENDER

    def reject(self, sender: int, reason: str, detail: object) -> None:
        """Counts a rejected message under ``sender`` (an id from :meth:`account` or
        :meth:`known`); logs the first of each reason per sender."""
        stats = self.get(sender)
        if self._senders.get(sender) is not stats:
            sender = UNKNOWN_SENDER
        stats.rejected[reason] = stats.rejected.get(reason, 0) + 1
        key = (sender, reason)
        if key not in self._logged and len(self._logged) < MAX_TRACKED_SENDERS:
            self._logged.add(key)
            logger.warning(
                "shard %d rejected a message from sender %d (%s): %s "
                "(further %s rejections from this sender are counted, not logged)",
                self._shard_index,
                sender,
                reason,
                detail,
                reason,
            )

    def rejected(self) -> dict[str, int]:
        """Rejections by reason, over every sender."""
        totals: dict[str, int] = {}
        for stats in self._senders.values():
            for reason, count in stats.rejected.items():
                totals[reason] = totals.get(reason, 0) + count
        return totals

    def delivery(self) -> dict[str, int]:
        """Delivery totals over every sender (``replay.server.lanes``)."""
        stats = self._senders.values()
        return {
            "duplicates_dropped": sum(s.duplicates for s in stats),
            "out_of_order_refused": sum(s.out_of_order for s in stats),
            "lost_at_restart": sum(s.lost_at_restart for s in stats),
        }

    def counters(self) -> dict[str, dict[str, object]]:
        """Per sender, plain JSON types (INFO's ``senders``)."""
        return {
            str(sender): {
                "inserts": s.inserts,
                "insert_messages_taken": s.taken,
                "transitions": s.transitions,
                "requests": s.requests,
                "rejected": dict(s.rejected),
                "policy_version_min": s.policy_version_min,
                "policy_version_max": s.policy_version_max,
                "last_sequence": s.last_sequence,
                "duplicates": s.duplicates,
                "out_of_order": s.out_of_order,
                "lost_at_restart": s.lost_at_restart,
            }
            for sender, s in self._senders.items()
        }

    def state(self) -> list:
        """Every sender's counters as JSON (for a snapshot)."""
        return [[sender, dataclasses.asdict(stats)] for sender, stats in self._senders.items()]

    def restore(self, entries: object) -> None:
        """Takes back :meth:`state`.

        Raises:
            SnapshotError: anything but a list of ``[sender, counters]`` of the known
                fields, integers (or None where allowed), at most the tracked number.
        """
        if not isinstance(entries, list) or len(entries) > MAX_TRACKED_SENDERS + 1:
            raise SnapshotError("sender counters: not a list of at most the tracked senders")
        restored = {}
        names = {f.name for f in dataclasses.fields(SenderStats)}
        for entry in entries:
            if not (
                isinstance(entry, list)
                and len(entry) == 2
                and _is_int(entry[0])
                and isinstance(entry[1], dict)
                and set(entry[1]) <= names
            ):
                raise SnapshotError(f"sender counters: malformed entry {entry!r:.100}")
            values = entry[1]
            rejected = values.get("rejected", {})
            if not (isinstance(rejected, dict) and all(_is_int(n) for n in rejected.values())):
                raise SnapshotError(f"sender counters: malformed rejections {rejected!r:.100}")
            if not all(
                _is_int(v)
                or (v is None and k not in ("inserts", "taken", "transitions", "requests"))
                for k, v in values.items()
                if k != "rejected"
            ):
                raise SnapshotError(f"sender counters: malformed counts {values!r:.100}")
            restored[entry[0]] = SenderStats(**values)
        self._senders = restored


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def claimed_sender(header_frame: object) -> int:
    """The sender id a malformed message claims, if its header gets that far."""
    header = memoryview(getattr(header_frame, "buffer", header_frame)).cast("B")
    if len(header) >= 8:
        return int.from_bytes(header[4:8], "little")
    return UNKNOWN_SENDER
