"""Sum-tree: against a plain-numpy reference, at float edges, and under long update runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import SumTree
from replay.errors import EmptyReplayError, InvalidIndexError, InvalidPriorityError


def reference_find(priorities: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """First leaf whose inclusive prefix sum exceeds the target (exact for integer data)."""
    inclusive = np.cumsum(priorities)
    found = np.searchsorted(inclusive, targets, side="right")
    last_positive = np.flatnonzero(priorities > 0)[-1]
    return np.minimum(found, last_positive)


@pytest.mark.parametrize("capacity", [1, 2, 7, 8, 9, 63, 64, 65, 511, 513, 4097, 100_003])
def test_any_capacity_sums_and_finds_like_the_reference(capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity)
    priorities = rng.integers(0, 5, capacity).astype(np.float64)
    priorities[rng.integers(0, capacity)] = 3.0  # at least one positive leaf
    tree.set(np.arange(capacity), priorities)
    assert tree.total == priorities.sum()
    assert tree.min_positive == priorities[priorities > 0].min()
    targets = rng.integers(0, int(priorities.sum()), 1000) + rng.choice([0.0, 0.5], 1000)
    np.testing.assert_array_equal(tree.find(targets), reference_find(priorities, targets))


@st.composite
def operation_sequences(draw: st.DrawFn) -> tuple[int, list[tuple[np.ndarray, np.ndarray]]]:
    capacity = draw(st.integers(1, 300))
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        count = draw(st.integers(1, 40))
        indices = draw(st.lists(st.integers(0, capacity - 1), min_size=count, max_size=count))
        values = draw(st.lists(st.integers(0, 1000), min_size=count, max_size=count))
        steps.append((np.array(indices), np.array(values, dtype=np.float64)))
    return capacity, steps


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(operation_sequences(), st.integers(0, 2**32 - 1))
def test_random_operation_sequences_match_the_reference(case, seed) -> None:
    capacity, steps = case
    tree = SumTree(capacity)
    reference = np.zeros(capacity)
    rng = np.random.default_rng(seed)
    for indices, values in steps:
        tree.set(indices, values)
        for index, value in zip(indices, values, strict=True):  # last write wins
            reference[index] = value
        np.testing.assert_array_equal(tree.leaves, reference)
        np.testing.assert_array_equal(tree.get(np.arange(capacity)), reference)
        assert tree.total == reference.sum()  # integers: exact in float64
        positive = reference[reference > 0]
        assert tree.min_positive == (positive.min() if positive.size else math.inf)
        if reference.sum() > 0:
            targets = rng.integers(0, int(reference.sum()) + 3, 64) + rng.random(64)
            np.testing.assert_array_equal(tree.find(targets), reference_find(reference, targets))


def test_stratified_sampling_uses_one_draw_per_stratum() -> None:
    tree = SumTree(4)
    tree.set(np.arange(4), np.array([1.0, 1.0, 2.0, 4.0]))  # total 8
    # Four strata of width 2: draws at 0.5·2, 2 + 0.99·2, 4 + 0, 6 + 0.5·2.
    leaves = tree.sample(4, uniforms=np.array([0.5, 0.99, 0.0, 0.5]))
    np.testing.assert_array_equal(leaves, [1, 2, 3, 3])


def test_zero_priority_leaves_are_never_returned_even_at_float_edges() -> None:
    capacity = 4096
    rng = np.random.default_rng(7)
    priorities = np.zeros(capacity)
    live = rng.choice(capacity, 40, replace=False)
    priorities[live] = rng.choice([5e-324, 1e-300, 1e-16, 1.0, 1e300], live.size)
    priorities[capacity - 1] = 0.0  # the last leaf is empty, so clamping must look back
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), priorities)
    total = tree.total
    edges = np.array([0.0, total, np.nextafter(total, 0), np.nextafter(total, np.inf), 2 * total])
    targets = np.concatenate([edges, rng.random(20_000) * total])
    found = tree.find(targets)
    assert (priorities[found] > 0).all()
    assert (priorities[tree.sample(4096, uniforms=np.nextafter(np.ones(4096), 0))] > 0).all()


def test_ten_million_updates_leave_the_root_exact_to_1e9() -> None:
    capacity = 1 << 16
    tree = SumTree(capacity)
    rng = np.random.default_rng(3)
    batch = 10_000
    for _ in range(1000):  # 10^7 updates with values over 12 orders of magnitude
        tree.set(rng.integers(0, capacity, batch), 10.0 ** rng.uniform(-6, 6, batch))
    exact = math.fsum(tree.leaves)
    assert abs(tree.total - exact) <= 1e-9 * exact
    before = tree.total
    tree.rebuild()
    assert tree.total == before  # parents are recomputed from children, so no drift exists


def test_rebuild_restores_a_tree_equal_to_incremental_updates() -> None:
    rng = np.random.default_rng(5)
    tree = SumTree(1000)
    for _ in range(50):
        tree.set(rng.integers(0, 1000, 37), rng.random(37))
    targets = rng.random(500) * tree.total
    found, total, smallest = tree.find(targets), tree.total, tree.min_positive
    tree.rebuild()
    assert (tree.total, tree.min_positive) == (total, smallest)
    np.testing.assert_array_equal(tree.find(targets), found)


@pytest.mark.parametrize(
    ("indices", "values", "error", "text"),
    [
        ([0, 1], [1.0, np.nan], InvalidPriorityError, "nan"),
        ([0, 1], [np.inf, 1.0], InvalidPriorityError, "inf"),
        ([0, 1], [1.0, -2.0], InvalidPriorityError, "-2.0"),
        ([0, 16], [1.0, 1.0], InvalidIndexError, "16"),
        ([-1], [1.0], InvalidIndexError, "-1"),
        (np.array([0.5]), [1.0], InvalidIndexError, "float64"),
        ([0, 1], [1.0], InvalidIndexError, "2 indices but 1"),
    ],
)
def test_bad_input_is_rejected_and_changes_nothing(indices, values, error, text) -> None:
    tree = SumTree(16)
    tree.set(np.arange(16), np.arange(16, dtype=np.float64))
    before = tree.leaves.copy()
    with pytest.raises(error, match=text):
        tree.set(np.asarray(indices), np.asarray(values))
    np.testing.assert_array_equal(tree.leaves, before)
    assert tree.total == before.sum()


def test_sampling_errors_are_clear() -> None:
    tree = SumTree(8)
    with pytest.raises(EmptyReplayError, match="total priority is zero"):
        tree.sample(4, np.random.default_rng(0))
    tree.set(np.array([3]), np.array([1.0]))
    for batch_size in (0, -3):
        with pytest.raises(InvalidIndexError, match="batch_size"):
            tree.sample(batch_size, np.random.default_rng(0))
    with pytest.raises(InvalidIndexError, match="capacity"):
        SumTree(0)
