"""Fixes a shard's replay ratio: how many transitions are sampled per transition inserted.

Counting transitions, let ``I`` be those inserted and ``S`` those sampled, and
``diff = I·spi − S`` with ``spi`` the target samples per insert. With ``m`` the minimum
size and ``e`` the error buffer:

* sampling waits while ``size < m`` or ``diff < spi·m − e``  (sampling ran ahead);
* inserting waits while ``diff > spi·m + e``                  (inserting ran ahead).

Each check is made before a whole batch, which may then overshoot the bound by one batch.
Because of that, the two conditions can never hold at once when ``e >= 0``: whenever one
side waits, the other side can go on, so the limiter cannot deadlock. Over a long run the
ratio ``S / I`` stays within ``(e + one batch) / I`` of ``spi``.

Without ``spi`` only the minimum size applies. This follows Reverb's ``MinSize`` and
``SampleToInsertRatio`` limiters, made batch-aware.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class RateLimiter:
    """Decides whether a shard may take an insert or answer a sample now.

    Attributes:
        min_size: transitions stored before any sample is answered.
        samples_per_insert: target sampled/inserted transitions, or None for no target.
        error_buffer: allowed deviation of ``diff``, in sampled transitions.
    """

    min_size: int = 1
    samples_per_insert: float | None = None
    error_buffer: float = 0.0
    inserted: int = 0
    sampled: int = 0

    @staticmethod
    def problems(
        min_size: int,
        samples_per_insert: float | None,
        error_buffer: float,
        capacity: int,
    ) -> list[str]:
        """Settings that would make a shard wait forever, with the arithmetic."""
        problems = []
        if not 1 <= min_size <= capacity:
            problems.append(
                f"min_size={min_size} must be in [1, capacity={capacity}]: "
                "a shard never holds more than its capacity, so it would never sample"
            )
        if samples_per_insert is not None:
            if not (math.isfinite(samples_per_insert) and samples_per_insert > 0):
                problems.append(
                    f"samples_per_insert must be finite and > 0, got {samples_per_insert}"
                )
            if not (math.isfinite(error_buffer) and error_buffer >= 0):
                problems.append(
                    f"error_buffer must be finite and >= 0, got {error_buffer}: with a negative "
                    "buffer the insert bound lies below the sample bound and both sides wait"
                )
        return problems

    @property
    def diff(self) -> float:
        if self.samples_per_insert is None:
            return 0.0
        return self.inserted * self.samples_per_insert - self.sampled

    def can_insert(self, pending: int = 0) -> bool:
        """Whether another insert message may be taken, with ``pending`` transitions
        taken already but not yet recorded (a shard stores a round's inserts at once)."""
        if self.samples_per_insert is None:
            return True
        ceiling = self.samples_per_insert * self.min_size + self.error_buffer
        return self.diff + pending * self.samples_per_insert <= ceiling

    def can_insert_unpaced(self, pending: int = 0) -> bool:
        """Whether an insert may be taken with the pacing lifted, as it is for the last
        batches of a stopping sender or shard: always. The replay ratio only paces a
        running learner; an insert refused at a stop is lost."""
        return True

    def can_sample(self, size: int, batch_size: int = 1) -> bool:
        """Whether a SAMPLE may be answered now (a prioritized store may repeat items, so
        ``batch_size`` does not matter here)."""
        if size < self.min_size:
            return False
        if self.samples_per_insert is None:
            return True
        floor = self.samples_per_insert * self.min_size - self.error_buffer
        return self.diff >= floor

    def record_insert(self, transitions: int) -> None:
        self.inserted += transitions

    def record_sample(self, transitions: int) -> None:
        self.sampled += transitions


@dataclass
class QueueLimiter:
    """A queue shard's limits (``replay.store.queue``): inserts wait while fewer than
    ``insert_room`` items fit, so no message ever meets a full queue; a SAMPLE waits
    until ``min_size`` items, and at least as many as it asks for, are queued. Each side
    waits only on the other, and capacity >= insert_room + min_size (``ShardConfig``)
    keeps them from waiting at once."""

    room: Callable[[], int]
    insert_room: int
    min_size: int = 1
    # Queued items a batch takes (fewer than its size where part is replayed).
    fresh_needed: Callable[[int], int] = lambda batch_size: batch_size
    inserted: int = 0
    sampled: int = 0
    diff: float = 0.0  # no replay ratio: reported as the prioritized limiter's is

    def can_insert(self, pending: int = 0) -> bool:
        return self.room() - pending >= self.insert_room

    def can_insert_unpaced(self, pending: int = 0) -> bool:
        """A queue has no pacing to lift: its room is a hard limit."""
        return self.can_insert(pending)

    def can_sample(self, size: int, batch_size: int = 1) -> bool:
        return size >= max(self.min_size, self.fresh_needed(batch_size))

    def record_insert(self, transitions: int) -> None:
        self.inserted += transitions

    def record_sample(self, transitions: int) -> None:
        self.sampled += transitions
