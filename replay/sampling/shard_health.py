"""What the learner's sampler knows of one shard: alive or down, its mass, its counters.

A shard that leaves a request unanswered for ``shard_timeout_s`` is marked down: its part
of every pending batch is re-drawn from the live shards, it is probed with INFO every
``probe_interval_s``, and it is used again as soon as it answers anything. Unless it is
only waiting: a shard whose rate limiter holds SAMPLE requests (no inserts lately: the
actors are slow, blocked or cut off) answers INFO meanwhile and says it holds them, and
the request is then waited for, not counted as an outage. A live shard
whose mass is not known to be positive yet is probed too: it gets no SAMPLE, so only INFO
can show it filling. Every shard is also asked for INFO every ``info_interval_s``, so the
learner's metrics read counters the sampler already has instead of making round trips.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from replay.protocol.sample_reply import SampleReply

logger = logging.getLogger(__name__)

# INFO requests remembered as unanswered; older ones are forgotten (their answers lost).
MAX_INFO_ASKS = 64


@dataclass
class ShardHealth:
    """One shard as the sampler sees it (times from ``time.monotonic``).

    Attributes:
        index, endpoint: which shard.
        alive: answering; a down shard gets no SAMPLE.
        total, min_positive, size: its priority mass ``Q_s``, smallest positive priority
            ``q_s`` and stored transitions, from its latest reply.
        info: its latest INFO counters (None before the first), received at ``info_at``
            and asked for at ``info_asked_at``: the shard answers a client's requests in
            order, so those counters saw every request sent before that time.
        replies, timeouts, outages: answers taken, requests that expired, times marked down.
        down_s: seconds spent down, over finished outages.
        limiter_waits: times a SAMPLE went unanswered past the timeout because the shard's
            rate limiter held it (one per wait, however long).
    """

    index: int
    endpoint: str
    alive: bool = True
    total: float = 0.0
    min_positive: float = math.inf
    size: int = 0
    info: dict | None = None
    info_at: float = -math.inf
    info_asked_at: float = -math.inf
    info_asks: dict[int, float] = field(default_factory=dict)
    """INFO requests not answered yet: request sequence -> when it was sent."""
    replies: int = 0
    timeouts: int = 0
    outages: int = 0
    down_s: float = 0.0
    down_since: float | None = None
    next_probe: float = 0.0
    next_info: float = 0.0
    limiter_waits: int = 0
    held_by_limiter: bool = False

    @property
    def mass(self) -> float:
        """The mass to split batches by: 0 for a shard that is down."""
        return self.total if self.alive else 0.0

    @property
    def usable(self) -> bool:
        return self.alive and self.total > 0

    def answered(self, now: float) -> None:
        """Any reply: the shard is alive."""
        self.replies += 1
        if not self.alive:
            logger.info("shard %d at %s answers again; using it", self.index, self.endpoint)
            self.alive = True
            if self.down_since is not None:
                self.down_s += now - self.down_since
                self.down_since = None

    def mark_down(self, now: float, reason: str, probe_interval_s: float) -> None:
        if self.alive:
            logger.warning("shard %d at %s marked down: %s", self.index, self.endpoint, reason)
            self.outages += 1
            self.down_since = now
        self.alive = False
        self.next_probe = now + probe_interval_s

    def wants_info(self, now: float) -> bool:
        """Whether to send INFO now: a probe of a down or empty shard, or the periodic one."""
        probe = (not self.alive or self.total <= 0) and now >= self.next_probe
        return probe or now >= self.next_info

    def asked_info(
        self, now: float, probe_interval_s: float, info_interval_s: float, sequence: int | None
    ) -> None:
        """An INFO was sent at ``now`` as request ``sequence`` (None: the queue was full)."""
        self.next_probe = now + probe_interval_s
        self.next_info = now + info_interval_s
        if sequence is not None:
            self.info_asks[sequence] = now
            if len(self.info_asks) > MAX_INFO_ASKS:  # answers lost with a restarted shard
                del self.info_asks[min(self.info_asks)]

    def info_unanswered_since(self, asked_at: float) -> float | None:
        """When the first INFO sent at or after ``asked_at`` and not answered yet was sent
        (None: there is none)."""
        times = [sent for sent in self.info_asks.values() if sent >= asked_at]
        return min(times) if times else None

    def holds_for_limiter(self, asked_at: float) -> bool:
        """Whether a SAMPLE asked at ``asked_at``, unanswered past the timeout, is held by
        the shard's rate limiter: the shard answered an INFO asked since (so after it
        had the SAMPLE), and that INFO had SAMPLE requests waiting. Said once per wait."""
        held = (
            self.alive
            and self.info is not None
            and self.info_asked_at >= asked_at
            and bool(self.info.get("samples_waiting"))
        )
        if held and not self.held_by_limiter:
            self.held_by_limiter = True
            self.limiter_waits += 1
            logger.info(
                "shard %d at %s holds samples for its rate limiter (inserts are "
                "behind); waiting for them",
                self.index,
                self.endpoint,
            )
        return held

    def apply_sample(self, reply: SampleReply) -> None:
        self.held_by_limiter = False
        self.total = reply.total_priority
        self.min_positive = reply.min_priority
        self.size = reply.size

    def apply_info(self, info: dict, now: float, sequence: int | None = None) -> None:
        """Takes the counters (``replay.server.shard.ShardServer.counters``) of the INFO
        reply to request ``sequence`` (None, or one not asked: as if asked ``now``)."""
        asked_at = now
        if sequence is not None:
            asked_at = self.info_asks.pop(sequence, now)
            # Replies come in order: an earlier INFO still unanswered was lost.
            for earlier in [seq for seq in self.info_asks if seq < sequence]:
                del self.info_asks[earlier]
        self.info_asked_at = max(self.info_asked_at, asked_at)
        self.total = float(info["total_priority"])
        self.size = int(info["size"])
        smallest = info.get("min_priority")  # JSON has no infinity: None means none
        self.min_positive = math.inf if smallest is None else float(smallest)
        self.info = info
        self.info_at = now

    def state(self, now: float) -> dict[str, object]:
        """A plain-dict view for metrics and tests."""
        ongoing = now - self.down_since if self.down_since is not None else 0.0
        return {
            "index": self.index,
            "endpoint": self.endpoint,
            "alive": self.alive,
            "total": self.total,
            "min_positive": self.min_positive,
            "size": self.size,
            "replies": self.replies,
            "timeouts": self.timeouts,
            "outages": self.outages,
            "down_s": self.down_s + ongoing,
            "limiter_waits": self.limiter_waits,
            "held_by_limiter": self.held_by_limiter,
            "info": self.info,
            "info_at": self.info_at,
            "info_asked_at": self.info_asked_at,
        }
