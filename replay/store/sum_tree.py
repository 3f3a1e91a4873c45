"""An 8-ary sum-tree (with a min-tree beside it) over float64 priorities, in numba.

Layout. Levels are stored top-down in one flat float64 array: level 0 is the root, level
``depth`` holds one leaf per slot. The children of node ``j`` of a level are nodes
``8j … 8j+7`` of the level below, and every level starts on a multiple of 8 elements of a
64-byte aligned buffer, so the 8 children of a node are exactly one cache line. Any
capacity works: each level holds ``ceil(nodes_below / 8)`` real nodes rounded up to a
multiple of 8 (for alignment), so a capacity of ``2**20`` costs ``2**20`` leaves, not the
``8**7`` a complete tree would need.

Why 8-ary. A prioritized batch descends ``depth`` levels; with a binary tree each step is a
dependent cache miss (77-230 ns each here). With 8 children per node the tree is a third as
deep, and the batched kernels below walk all queries one level at a time, so the misses of
the 512 queries overlap instead of chaining. Child choice is branch-free (a running prefix
sum and a counted comparison), which keeps the inner loop free of mispredictions.

Exactness. A parent is always recomputed as the sum of its 8 children, never adjusted by a
delta, so the tree is a pure function of its leaves: no drift accumulates however many
updates run, and ``rebuild()`` reproduces it bit for bit. The root differs from the exact
(infinitely precise) sum of the leaves by at most about ``depth * 8 * 2**-53`` relative.

Zero priorities. A leaf of priority 0 is never returned: a child is chosen only where the
running prefix sum strictly exceeds the target, and when rounding puts a target at or past
a node's total the descent clamps to the last child with positive mass.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from replay.errors import (
    EmptyReplayError,
    InvalidIndexError,
    InvalidPriorityError,
    SnapshotError,
)
from replay.store.state import Rows

ARITY = 8
_SHIFT = 3  # log2(ARITY)
_CACHE_LINE_BYTES = 64


def aligned_empty(
    size: int, dtype: np.dtype | type, alignment: int = _CACHE_LINE_BYTES
) -> np.ndarray:
    """A 1-D uninitialised array whose first element sits on an ``alignment``-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = size * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes].view(dtype)


def _layout(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Level offsets (top-down, plus the total length at the end) and real node counts."""
    real = [capacity]
    while real[-1] > 1:
        real.append(-(-real[-1] // ARITY))
    real.reverse()  # top-down: [1, ..., capacity]
    offsets = [0]
    for count in real:
        offsets.append(offsets[-1] + -(-count // ARITY) * ARITY)
    if len(real) == 1:
        # capacity 1: the root is also the only leaf, but the kernels want a parent level.
        real = [1, 1]
        offsets = [0, ARITY, 2 * ARITY]
    return np.asarray(offsets, dtype=np.int64), np.asarray(real, dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _children_sum(sums: np.ndarray, first: int) -> float:
    # Fixed pairwise order: rebuild() and the updates must round identically.
    return ((sums[first] + sums[first + 1]) + (sums[first + 2] + sums[first + 3])) + (
        (sums[first + 4] + sums[first + 5]) + (sums[first + 6] + sums[first + 7])
    )


@njit(cache=True, nogil=True, inline="always")
def _children_min(mins: np.ndarray, first: int) -> float:
    return min(
        min(min(mins[first], mins[first + 1]), min(mins[first + 2], mins[first + 3])),
        min(min(mins[first + 4], mins[first + 5]), min(mins[first + 6], mins[first + 7])),
    )


@njit(cache=True, nogil=True)
def set_leaves(
    sums: np.ndarray,
    mins: np.ndarray,
    offsets: np.ndarray,
    leaves: np.ndarray,
    values: np.ndarray,
) -> None:
    """Writes ``values`` at ``leaves`` (in order: a repeated leaf keeps its last value) and
    recomputes every ancestor from its children. O(n · depth); inputs are not checked."""
    depth = offsets.size - 2
    leaf_base = offsets[depth]
    n = leaves.size
    for i in range(n):
        value = values[i]
        sums[leaf_base + leaves[i]] = value
        mins[leaf_base + leaves[i]] = value if value > 0.0 else np.inf
    for level in range(depth - 1, -1, -1):
        shift = _SHIFT * (depth - level)
        base = offsets[level]
        child_base = offsets[level + 1]
        previous = -1
        for i in range(n):
            node = leaves[i] >> shift
            if node == previous:  # runs of neighbouring slots share parents
                continue
            previous = node
            first = child_base + (node << _SHIFT)
            sums[base + node] = _children_sum(sums, first)
            mins[base + node] = _children_min(mins, first)


@njit(cache=True, nogil=True)
def find_leaves(
    sums: np.ndarray, offsets: np.ndarray, targets: np.ndarray, out: np.ndarray
) -> None:
    """For each target ``t`` in ``[0, total)``, writes the leaf ``i`` with
    ``prefix(i) <= t < prefix(i) + p_i``; a target at or past the total maps to the last
    positive leaf. Queries advance one level at a time so their cache misses overlap.
    O(n · depth). Requires a positive total; inputs are not checked."""
    depth = offsets.size - 2
    n = targets.size
    remaining = targets.copy()
    for i in range(n):
        out[i] = 0
    for level in range(1, depth + 1):
        base = offsets[level]
        for i in range(n):
            first = base + (out[i] << _SHIFT)
            target = remaining[i]
            running = 0.0
            below = 0.0
            chosen = 0
            for k in range(ARITY):
                running += sums[first + k]
                passed = running <= target
                chosen += passed
                below = running if passed else below
            if chosen == ARITY:
                # Rounding put the target at or past this node's total: take the last
                # child with mass and aim at its end (it clamps again further down).
                chosen = ARITY - 1
                while sums[first + chosen] <= 0.0 and chosen > 0:
                    chosen -= 1
                remaining[i] = sums[first + chosen]
            else:
                remaining[i] = target - below
            out[i] = (out[i] << _SHIFT) + chosen


@njit(cache=True, nogil=True)
def stratified_targets(total: float, uniforms: np.ndarray, out: np.ndarray) -> None:
    """Splits ``[0, total)`` into ``n`` equal strata and puts one draw in each:
    ``out[b] = (b + u_b) · total / n``."""
    n = uniforms.size
    width = total / n
    for b in range(n):
        out[b] = (b + uniforms[b]) * width


@njit(cache=True, nogil=True)
def rebuild_levels(
    sums: np.ndarray, mins: np.ndarray, offsets: np.ndarray, real_nodes: np.ndarray
) -> None:
    """Recomputes every inner node from the leaves. O(capacity)."""
    depth = offsets.size - 2
    for level in range(depth - 1, -1, -1):
        base = offsets[level]
        child_base = offsets[level + 1]
        for node in range(real_nodes[level]):
            first = child_base + (node << _SHIFT)
            sums[base + node] = _children_sum(sums, first)
            mins[base + node] = _children_min(mins, first)


@njit(cache=True, nogil=True)
def first_invalid_priority(values: np.ndarray) -> int:
    """Index of the first NaN, infinite or negative value, or -1 if all are valid."""
    for i in range(values.size):
        value = values[i]
        if not (value >= 0.0 and value < np.inf):
            return i
    return -1


@njit(cache=True, nogil=True)
def first_out_of_range(indices: np.ndarray, upper: int) -> int:
    """Index of the first entry outside ``[0, upper)``, or -1."""
    for i in range(indices.size):
        if indices[i] < 0 or indices[i] >= upper:
            return i
    return -1


class SumTree:
    """Prioritized categorical distribution over ``capacity`` slots.

    ``P(i) = p_i / Σ_j p_j`` for non-negative float64 priorities ``p``. Also keeps the
    minimum positive priority (for the largest importance weight) in a parallel min-tree.

    Args:
        capacity: number of leaves, any positive integer.

    Raises:
        InvalidIndexError: if ``capacity`` is not a positive integer.
    """

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        """The bytes a tree of ``capacity`` leaves allocates: its sum and min trees."""
        return 2 * 8 * int(_layout(int(capacity))[0][-1])

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise InvalidIndexError(f"capacity must be a positive integer, got {capacity!r}")
        self._capacity = int(capacity)
        self._offsets, self._real_nodes = _layout(self._capacity)
        length = int(self._offsets[-1])
        self._sums = aligned_empty(length, np.float64)
        self._sums[:] = 0.0
        self._mins = aligned_empty(length, np.float64)
        self._mins[:] = np.inf
        depth = self._offsets.size - 2
        self._leaves = self._sums[self._offsets[depth] : self._offsets[depth] + self._capacity]
        self._leaves.flags.writeable = False
        self._targets = np.empty(0, dtype=np.float64)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def nbytes(self) -> int:
        """Bytes of the tree's arrays (the leaves are part of them)."""
        return self._sums.nbytes + self._mins.nbytes

    @property
    def depth(self) -> int:
        """Number of levels below the root (the number of steps of one descent)."""
        return self._offsets.size - 2

    @property
    def total(self) -> float:
        """Σ p_i, O(1)."""
        return float(self._sums[0])

    @property
    def min_positive(self) -> float:
        """The smallest positive priority, or ``inf`` if none is positive. O(1)."""
        return float(self._mins[0])

    @property
    def leaves(self) -> np.ndarray:
        """A read-only view of the priorities, one per slot."""
        return self._leaves

    def get(self, indices: np.ndarray) -> np.ndarray:
        """Priorities at ``indices``."""
        indices = self._checked_indices(indices)
        return self._leaves[indices]

    def set(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Sets ``p[indices] = priorities``; where an index repeats, the last value wins.
        O(n · depth).

        Raises:
            InvalidIndexError: an index outside ``[0, capacity)`` or lengths that differ.
            InvalidPriorityError: a NaN, infinite or negative priority. Nothing is changed.
        """
        indices = self._checked_indices(indices)
        priorities = np.ascontiguousarray(priorities, dtype=np.float64).reshape(-1)
        if priorities.size != indices.size:
            raise InvalidIndexError(f"{indices.size} indices but {priorities.size} priorities")
        bad = first_invalid_priority(priorities)
        if bad >= 0:
            raise InvalidPriorityError(
                f"priority {priorities[bad]!r} at position {bad} (slot {indices[bad]}) "
                "is not finite and non-negative"
            )
        set_leaves(self._sums, self._mins, self._offsets, indices, priorities)

    def set_unchecked(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """:meth:`set` for int64 indices and float64 priorities the caller has validated."""
        set_leaves(self._sums, self._mins, self._offsets, indices, priorities)

    def find(self, targets: np.ndarray) -> np.ndarray:
        """Prefix-sum search: for each ``t`` the leaf ``i`` with
        ``Σ_{j<i} p_j <= t < Σ_{j<=i} p_j``. Targets at or past the total give the last leaf
        with positive priority. O(n · depth).

        Raises:
            EmptyReplayError: if the total is zero.
            InvalidPriorityError: if a target is negative or not finite.
        """
        targets = np.ascontiguousarray(targets, dtype=np.float64).reshape(-1)
        self._require_mass()
        bad = first_invalid_priority(targets)
        if bad >= 0:
            raise InvalidPriorityError(
                f"target {targets[bad]!r} at position {bad} is not finite and >= 0"
            )
        out = np.empty(targets.size, dtype=np.int64)
        find_leaves(self._sums, self._offsets, targets, out)
        return out

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator | None = None,
        uniforms: np.ndarray | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Stratified sampling: ``[0, total)`` is split into ``batch_size`` equal strata and
        one leaf is drawn in each, with probability proportional to its priority.

        Args:
            batch_size: number of leaves to draw, > 0.
            rng: source of the uniform draws (ignored when ``uniforms`` is given).
            uniforms: ``batch_size`` draws in ``[0, 1)``, one per stratum, for exact tests.
            out: optional int64 array of length ``batch_size`` to write the leaves into.

        Returns:
            int64 leaf indices, in stratum order (so non-decreasing prefix sums).

        Raises:
            EmptyReplayError: if the total is zero.
            InvalidIndexError: if ``batch_size`` is not positive or ``uniforms`` has the
                wrong length.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise InvalidIndexError(f"batch_size must be a positive integer, got {batch_size!r}")
        total = self._require_mass()
        if uniforms is None:
            if rng is None:
                raise InvalidIndexError("sample() needs an rng or explicit uniforms")
            uniforms = rng.random(batch_size)
        else:
            uniforms = np.ascontiguousarray(uniforms, dtype=np.float64).reshape(-1)
            if uniforms.size != batch_size:
                raise InvalidIndexError(f"{uniforms.size} uniforms for batch_size {batch_size}")
        if self._targets.size != batch_size:
            self._targets = np.empty(batch_size, dtype=np.float64)
        stratified_targets(total, uniforms, self._targets)
        if out is None:
            out = np.empty(batch_size, dtype=np.int64)
        find_leaves(self._sums, self._offsets, self._targets, out)
        return out

    def state(self, slots_touched: int | None = None) -> tuple[dict, dict]:
        """The leaves (the inner nodes are rebuilt from them), for a snapshot: the first
        ``slots_touched`` (the storage's; the others hold zero) or all."""
        leaves = self._leaves if slots_touched is None else Rows.prefix(self._leaves, slots_touched)
        return {"leaves": leaves}, {"capacity": self._capacity}

    def restore(self, read, meta: dict) -> None:
        """Takes back a :meth:`state` (leaves not written read as zero); raises
        ``SnapshotError`` for another capacity or priorities that are not finite and >= 0."""
        if meta.get("capacity") != self._capacity:
            raise SnapshotError(
                f"sum-tree of {meta.get('capacity')!r} leaves, here {self._capacity}"
            )
        leaves = read("leaves", None)
        if leaves.dtype != np.float64 or leaves.shape != (self._capacity,):
            raise SnapshotError(f"sum-tree leaves are {leaves.dtype}{leaves.shape}")
        if first_invalid_priority(leaves) >= 0:
            raise SnapshotError("sum-tree leaves hold a negative or non-finite priority")
        start = self._offsets[self._offsets.size - 2]
        self._sums[start : start + self._capacity] = leaves
        self._mins[start : start + self._capacity] = np.where(leaves > 0.0, leaves, np.inf)
        self.rebuild()

    def rebuild(self) -> None:
        """Recomputes all inner nodes from the leaves. O(capacity)."""
        rebuild_levels(self._sums, self._mins, self._offsets, self._real_nodes)

    def _require_mass(self) -> float:
        total = float(self._sums[0])
        if not total > 0.0:
            raise EmptyReplayError("cannot sample: the total priority is zero")
        return total

    def _checked_indices(self, indices: np.ndarray) -> np.ndarray:
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            raise InvalidIndexError(f"slot indices must be integers, got dtype {indices.dtype}")
        indices = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
        bad = first_out_of_range(indices, self._capacity)
        if bad >= 0:
            raise InvalidIndexError(
                f"slot index {indices[bad]} at position {bad} is outside [0, {self._capacity})"
            )
        return indices
