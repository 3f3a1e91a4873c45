"""A queue of items handed out once each, oldest first: a shard's store in queue mode.

IMPALA's learner takes each unroll once, in the order the actors made them (the least
stale first), and an actor must wait, not overwrite, while the learner is behind. The
queue keeps items in the same ring a prioritized store does (``RingStorage``: the same
specs, checks, gathers and snapshots), with a cursor instead of a sum-tree:

* ``handed``: items handed out so far; the oldest queued item is generation ``handed``,
  in slot ``handed % capacity``;
* queued: ``items_written − handed``, never more than the capacity: :meth:`add` refuses a
  batch that would overwrite a queued item, so nothing accepted is ever lost. The shard
  stops taking inserts before that (``room``), so the refusal is for a message larger
  than the queue, not for a busy learner.

An item is checked for its values too before anything is written, since an unroll's
numbers go straight into the learner's loss: floating fields must be finite, and the
fields of IMPALA's unrolls named in :data:`VALUE_BOUNDS` within their bounds (an action
at least 0, a log-probability at most 0, a discount in [0, 1], a policy version at least
-1: an actor acts on its initial weights, version -1, until the learner's first arrive).

With a ``replay_share`` (IMPALA's experience-replay variant), that share of each batch
is drawn uniformly from items already handed out and still in the ring (generations
``[items_written − capacity, handed)``), the rest are the oldest queued ones; while too
few have been handed out, fewer are replayed. Each fresh item is still handed out once,
in order, and inserts wait exactly as without it.

Atari unrolls keep their frames once (``replay.frames.storage``, given as ``storage``):
frames come first (:meth:`add_frames`), then unrolls that refer to them. Should the frame
ring run short, the store evicts the oldest items to free frames: handed-out ones first,
and only then queued ones, which the queue then skips and counts (``evicted_queued``: lost
data; the default frame ring is sized so that it does not happen).

It offers the members of ``PrioritizedReplay`` a shard uses; priorities do not apply:
an insert's are ignored and an update is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from replay.errors import (
    EmptyReplayError,
    InvalidBatchError,
    InvalidIndexError,
    ReplayError,
    SnapshotError,
)
from replay.store.prioritized import SampledBatch
from replay.store.spec import TransitionSpec
from replay.store.state import Reader, meta_int, prefixed, sub_reader
from replay.store.storage import BatchBuffers, RingStorage, StorageView

if TYPE_CHECKING:
    from replay.frames.storage import FrameStackStorage

# Bounds of the values of named fields (inclusive).
VALUE_BOUNDS = {
    "action": (0, np.inf),
    "log_prob": (-np.inf, 0.0),
    "discount": (0.0, 1.0),
    "version": (-1, np.inf),
}


class QueueFullError(InvalidBatchError):
    """A batch that would overwrite items not yet handed out."""


class UnrollQueue(StorageView):
    """Items handed out once each, oldest first.

    Args:
        spec: the fields of an item (an unroll: fields with a time axis).
        capacity: items kept at most.
        replay_share: the share of each batch replayed, in [0, 1).
        seed: of the generator that picks replayed items.
        storage: where items live: a ``RingStorage`` of ``spec`` by default, or a frame
            storage of unrolls (``replay.frames.storage``; ``spec`` is then ignored).

    Raises:
        InvalidIndexError: ``capacity`` is not a positive integer or not the storage's,
            or ``replay_share`` is outside [0, 1).
    """

    def __init__(
        self,
        spec: TransitionSpec,
        capacity: int,
        replay_share: float = 0.0,
        seed: int = 0,
        storage: RingStorage | FrameStackStorage | None = None,
    ) -> None:
        if not 0.0 <= replay_share < 1.0:
            raise InvalidIndexError(f"replay_share must be in [0, 1), got {replay_share!r}")
        self._storage = storage if storage is not None else RingStorage(spec, capacity)
        if self._storage.capacity != capacity:
            raise InvalidIndexError(
                f"capacity {capacity} is not the storage's {self._storage.capacity}"
            )
        self.evicted_queued = 0
        self._handed = 0
        self.replay_share = replay_share
        self._rng = np.random.default_rng(seed)
        self.replayed = 0
        # What a shard's INFO reports of a prioritized store, for one shape of counters:
        # a queue refuses every update whole, so it drops none.
        self.update_drops: dict[str, int] = {}

    @property
    def handed(self) -> int:
        """Items handed out so far."""
        return self._handed

    @property
    def size(self) -> int:
        """Items queued: added and not handed out yet."""
        return self._storage.items_written - self._handed

    @property
    def room(self) -> int:
        """Items that can be added now without overwriting a queued one."""
        return self.capacity - self.size

    @property
    def total_priority(self) -> float:
        """Every queued item counts one (INFO's ``total_priority``)."""
        return float(self.size)

    @property
    def min_priority(self) -> float:
        return 1.0 if self.size else float("inf")

    def add(self, batch: Mapping[str, np.ndarray], priorities: np.ndarray | None = None):
        """Appends a batch; ``priorities`` are ignored (a queue has none).

        Returns:
            int64 slots written, in item order.

        Raises:
            InvalidBatchError: missing/unknown field, wrong dtype, shape or length, or a
                value out of its field's bounds (see the module's notes).
            QueueFullError: the batch would overwrite items not handed out yet.
        """
        count = self._storage.spec.check_batch(batch)
        self._storage.spec.check_finite(batch)
        for name in batch:
            _check_bounds(name, batch[name])
        if count > self.room:
            raise QueueFullError(
                f"{count} items do not fit: {self.size} of {self.capacity} "
                "are queued and not handed out yet"
            )
        return self._storage.write(batch, count)

    def replayable(self, batch_size: int) -> int:
        """How many items of a batch of ``batch_size`` are replayed now."""
        if not self.replay_share:
            return 0
        handed_in_ring = self._handed - self._storage.oldest_live
        return min(round(batch_size * self.replay_share), handed_in_ring)

    def fresh_needed(self, batch_size: int) -> int:
        """Queued items a batch of ``batch_size`` takes now."""
        return batch_size - self.replayable(batch_size)

    def _evicted(self) -> None:
        # Evicted items' generations are gone (oldest_live moved past them): queued ones
        # among them are skipped, and counted.
        self._storage.take_evicted()
        if self._storage.oldest_live > self._handed:
            self.evicted_queued += self._storage.oldest_live - self._handed
            self._handed = self._storage.oldest_live

    def allocate_batch(self, batch_size: int) -> BatchBuffers:
        return self._storage.allocate_batch(batch_size)

    def sample(
        self,
        batch_size: int,
        beta: float = 0.0,
        *,
        out: BatchBuffers | None = None,
        packed: bool = False,
    ) -> SampledBatch:
        """Hands out the oldest queued items, each once, and with a ``replay_share`` some
        handed out before (weights 1). ``beta`` and ``packed`` are the prioritized
        store's: a queue has no priorities; ``packed`` leaves a frame storage's stacks
        apart (``SampledBatch.frames``), as the prioritized store does.

        Raises:
            InvalidIndexError: ``batch_size`` is not a positive integer.
            EmptyReplayError: fewer queued items than the batch's fresh part.
        """
        if not isinstance(batch_size, int | np.integer) or batch_size <= 0:
            raise InvalidIndexError(f"batch_size must be a positive integer, got {batch_size!r}")
        replayed = self.replayable(int(batch_size))
        fresh = int(batch_size) - replayed
        if fresh > self.size:
            raise EmptyReplayError(f"{fresh} items asked, {self.size} queued")
        generations = self._handed + np.arange(fresh, dtype=np.int64)
        if replayed:
            oldest = self._storage.oldest_live
            earlier = self._rng.integers(oldest, self._handed, replayed, dtype=np.int64)
            generations = np.concatenate([generations, earlier])
        slots = generations % self.capacity
        frames = None
        if packed and hasattr(self._storage, "gather_packed"):
            transitions, frames = self._storage.gather_packed(slots)
        else:
            transitions = self._storage.gather(slots, out)
        self._handed += fresh
        self.replayed += replayed
        ones = np.ones(int(batch_size))
        return SampledBatch(transitions, slots, generations, ones, ones.astype(np.float32), frames)

    def update_priorities(self, indices, generations, priorities) -> int:
        raise ReplayError("a queue has no priorities to update")

    def state(self) -> tuple[dict, dict]:
        """Arrays and scalars for a snapshot (see ``replay.store.state``)."""
        arrays, meta = self._storage.state()
        return prefixed("storage.", arrays), {
            "storage": meta,
            "queue": {"handed": self._handed, "evicted_queued": self.evicted_queued},
        }

    def restore(self, read: Reader, meta: dict) -> None:
        """Takes back :meth:`state`.

        Raises:
            SnapshotError: another spec or capacity, no queue cursor, or a cursor past
                what was written or behind what the ring still holds.
        """
        queue, storage = meta.get("queue"), meta.get("storage")
        if not isinstance(queue, dict) or not isinstance(storage, dict):
            raise SnapshotError("the snapshot is not of a queue (no queue cursor)")
        handed = meta_int(queue, "handed")
        self._storage.restore(sub_reader(read, "storage."), storage)
        written = self._storage.items_written
        if not written - self.capacity <= handed <= written:
            raise SnapshotError(
                f"queue cursor {handed} outside [{written - self.capacity}, "
                f"{written}] of the items written"
            )
        self._handed = handed
        # Snapshots from before frame queues have no such counter.
        self.evicted_queued = meta_int(queue, "evicted_queued") if "evicted_queued" in queue else 0


def _check_bounds(name: str, array: np.ndarray) -> None:
    bounds = VALUE_BOUNDS.get(name)
    if bounds is not None and array.size:
        low, high = bounds
        if array.min() < low or array.max() > high:
            raise InvalidBatchError(f"field {name!r} holds values outside [{low}, {high}]")
