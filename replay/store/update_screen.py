"""Which priority updates a prioritized store applies: each names a slot and the item
(generation) it was sampled as, and lands only where that slot holds that item now, with
a priority that is finite and non-negative. The others are dropped and counted by reason,
so no update, stale, forged or broken, can give an empty slot a share of the samples.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from replay.errors import InvalidIndexError, InvalidPriorityError

# Why an update was dropped, as ``update_drops`` counts it: the slot is not one of the
# store's; the item named was never written there (generation -1, past the newest, or of
# another slot); it was, but has been overwritten or evicted since; the priority is NaN,
# infinite, negative, or overflows after ``** alpha``.
UPDATE_DROP_REASONS = ("out_of_range", "never_written", "stale", "bad_priority")
_OUT_OF_RANGE, _NEVER_WRITTEN, _STALE, _BAD_PRIORITY = range(4)


@njit(cache=True, nogil=True)
def screen_updates(
    slots: np.ndarray,
    generations: np.ndarray,
    priorities: np.ndarray,
    alpha: float,
    slot_generations: np.ndarray,
    items_written: int,
    kept_slots: np.ndarray,
    kept_powered: np.ndarray,
    drops: np.ndarray,
) -> int:
    """Copies, in order, the updates that name the item their slot holds now, with
    ``p^α`` for each; counts the others into ``drops`` by reason (``UPDATE_DROP_REASONS``)
    and returns how many were kept.

    Item ``g`` only ever lives in slot ``g % capacity``, so an update is kept only when
    ``0 <= g < items_written``, ``slot == g % capacity`` and the slot's generation is
    ``g``: an empty slot (generation -1) or one freed early is never given priority."""
    capacity = slot_generations.size
    kept = 0
    for i in range(slots.size):
        slot = slots[i]
        generation = generations[i]
        if slot < 0 or slot >= capacity:
            drops[_OUT_OF_RANGE] += 1
            continue
        if generation < 0 or generation >= items_written or generation % capacity != slot:
            drops[_NEVER_WRITTEN] += 1
            continue
        if slot_generations[slot] != generation:
            drops[_STALE] += 1
            continue
        p = priorities[i]
        q = p**alpha if p >= 0.0 and p < np.inf else np.inf
        if not q < np.inf:
            drops[_BAD_PRIORITY] += 1
            continue
        kept_slots[kept] = slot
        kept_powered[kept] = q
        kept += 1
    return kept


def float64_vector(priorities: np.ndarray, count: int) -> np.ndarray:
    """``priorities`` as a contiguous float64 vector of ``count``; its values unchecked."""
    values = priorities
    if not (type(values) is np.ndarray and values.dtype == np.float64):
        values = np.asarray(priorities)
    if values.dtype.kind not in "iuf" or values.shape != (count,):
        raise InvalidPriorityError(
            f"priorities must be a numeric vector of shape ({count},), "
            f"got dtype {values.dtype} and shape {values.shape}"
        )
    if values.dtype != np.float64 or not values.flags.c_contiguous:
        values = np.ascontiguousarray(values, dtype=np.float64)
    return values


def int64_vector(values: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "iu" or array.ndim != 1:
        raise InvalidIndexError(
            f"{name} must be a 1-D integer array, got dtype {array.dtype} and shape {array.shape}"
        )
    return np.ascontiguousarray(array, dtype=np.int64)
