"""Prioritized replay: distribution, importance weights, stale updates, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from replay import PrioritizedReplay, TransitionSpec
from replay.errors import (
    EmptyReplayError,
    InvalidBatchError,
    InvalidIndexError,
    InvalidPriorityError,
    ReplayError,
)
from tests.conftest import chi2_critical, make_batch

ALPHA = 0.6
BETA = 0.4


def filled_replay(spec: TransitionSpec, priorities: np.ndarray, seed: int = 0) -> PrioritizedReplay:
    replay = PrioritizedReplay(spec, capacity=priorities.size, alpha=ALPHA, rng=seed)
    replay.add(make_batch(spec, priorities.size), priorities)
    return replay


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = counts.sum() * probabilities
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 512])
def test_sampled_frequencies_follow_priority_to_the_alpha(
    small_spec: TransitionSpec, batch_size: int
) -> None:
    """102,400 draws over 62 live items; chi-square at significance 1e-3.

    With ``batch_size=1`` the single stratum is the whole range, so draws are independent
    and the statistic has its textbook distribution. With 512 strata the draws vary less
    than independent ones, which only makes the statistic smaller. In both cases the
    negative control (the wrong exponent) must be rejected by a wide margin."""
    rng = np.random.default_rng(11)
    priorities = rng.uniform(0.05, 5.0, 64)
    priorities[[3, 17]] = 0.0  # never sampled
    replay = filled_replay(small_spec, priorities, seed=12)
    counts = np.zeros(64)
    for _ in range(102_400 // batch_size):
        np.add.at(counts, replay.sample(batch_size, BETA).indices, 1)
    assert counts[[3, 17]].sum() == 0
    live = priorities > 0
    target = priorities[live] ** ALPHA / (priorities[live] ** ALPHA).sum()
    critical = chi2_critical(int(live.sum()) - 1, 1e-3)
    assert chi_square(counts[live], target) < critical
    wrong = priorities[live] / priorities[live].sum()  # alpha = 1 instead of 0.6
    assert chi_square(counts[live], wrong) > 10 * critical


def test_importance_weights_match_the_formula(small_spec: TransitionSpec) -> None:
    rng = np.random.default_rng(2)
    priorities = rng.uniform(0.01, 10.0, 300)
    replay = PrioritizedReplay(small_spec, capacity=500, alpha=ALPHA, rng=3)
    replay.add(make_batch(small_spec, 300), priorities)  # N = 300 of 500 slots
    sample = replay.sample(256, BETA)
    stored = priorities**ALPHA
    probability = stored / stored.sum()
    n = 300
    max_weight = ((n * probability) ** -BETA).max()
    expected = (n * probability[sample.indices]) ** -BETA / max_weight
    np.testing.assert_allclose(sample.weights, expected, rtol=1e-6)
    np.testing.assert_allclose(sample.priorities, stored[sample.indices], rtol=1e-12)
    assert sample.weights.dtype == np.float32
    assert replay.total_priority == pytest.approx(stored.sum(), rel=1e-12)
    assert replay.min_priority == pytest.approx(stored.min(), rel=1e-12)


def test_sampled_transitions_match_their_slots(small_spec: TransitionSpec) -> None:
    replay = filled_replay(small_spec, np.ones(50))
    buffers = replay.allocate_batch(32)
    sample = replay.sample(32, BETA, out=buffers)
    np.testing.assert_array_equal(sample.transitions["action"], sample.indices)
    np.testing.assert_array_equal(sample.transitions["obs"][:, 0], sample.indices)
    np.testing.assert_array_equal(sample.generations, sample.indices)
    assert sample.transitions["obs"].base is not None  # a view of the reused buffers


def test_alpha_zero_samples_uniformly_zeros_included(small_spec: TransitionSpec) -> None:
    replay = PrioritizedReplay(small_spec, capacity=4, alpha=0.0, rng=0)
    replay.add(make_batch(small_spec, 4), np.array([0.0, 1.0, 100.0, 5.0]))
    sample = replay.sample(4, BETA, uniforms=np.full(4, 0.5))
    np.testing.assert_array_equal(sample.indices, [0, 1, 2, 3])
    np.testing.assert_array_equal(sample.weights, np.ones(4))


def test_updates_change_the_distribution_and_last_write_wins(small_spec: TransitionSpec) -> None:
    replay = filled_replay(small_spec, np.ones(8))
    slots = np.array([2, 5, 2])
    dropped = replay.update_priorities(slots, slots, np.array([9.0, 0.0, 4.0]))
    assert dropped == 0
    np.testing.assert_allclose(replay.tree.get(np.array([2, 5])), [4.0**ALPHA, 0.0])
    assert 5 not in replay.sample(512, BETA).indices


def test_stale_updates_are_dropped_and_counted(small_spec: TransitionSpec) -> None:
    replay = filled_replay(small_spec, np.ones(16))
    sample = replay.sample(8, BETA, uniforms=np.linspace(0, 0.9, 8))
    # Overwrite the first 4 slots (items 16..19 land in slots 0..3).
    replay.add(make_batch(small_spec, 4, first_id=16), np.ones(4))
    overwritten = sample.indices < 4
    before = replay.tree.leaves.copy()
    dropped = replay.update_priorities(sample.indices, sample.generations, np.full(8, 7.0))
    assert dropped == overwritten.sum() > 0
    assert replay.dropped_updates == dropped
    after = replay.tree.leaves
    np.testing.assert_array_equal(
        after[sample.indices[overwritten]], before[sample.indices[overwritten]]
    )
    np.testing.assert_allclose(after[sample.indices[~overwritten]], 7.0**ALPHA)


def snapshot(replay: PrioritizedReplay) -> tuple:
    storage = replay.storage
    columns = tuple(storage.column(name).copy() for name in storage.spec)
    return (replay.tree.leaves.copy(), storage.generations.copy(), storage.items_written, columns)


def assert_unchanged(replay: PrioritizedReplay, before: tuple) -> None:
    after = snapshot(replay)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2] == before[2]
    for a, b in zip(after[3], before[3], strict=True):
        np.testing.assert_array_equal(a, b)


def bad_adds(spec: TransitionSpec):
    good = make_batch(spec, 5)
    yield "missing field", {k: v for k, v in good.items() if k != "reward"}, np.ones(5), "reward"
    yield "unknown field", {**good, "extra": good["reward"]}, np.ones(5), "extra"
    yield "wrong dtype", {**good, "obs": good["obs"].astype(np.float64)}, np.ones(5), "obs.*float64"
    yield "wrong shape", {**good, "obs": np.zeros((5, 3), np.float32)}, np.ones(5), r"obs.*\(5, 3\)"
    yield "ragged lengths", {**good, "reward": good["reward"][:4]}, np.ones(5), "reward"
    yield "not an array", {**good, "action": [1, 2, 3, 4, 5]}, np.ones(5), "action.*list"
    yield "nan priority", good, np.array([1, 1, np.nan, 1, 1.0]), "nan.*position 2"
    yield "inf priority", good, np.array([1, 1, 1, np.inf, 1.0]), "inf.*position 3"
    yield "negative priority", good, np.array([1, -1, 1, 1, 1.0]), "-1.0.*position 1"
    yield "priority count", good, np.ones(4), r"shape \(5,\)"


@pytest.mark.parametrize(
    "case",
    list(
        bad_adds(
            TransitionSpec.from_dict(
                {
                    "obs": ((4,), "float32"),
                    "action": ((), "int64"),
                    "reward": ((), "float32"),
                }
            )
        )
    ),
    ids=lambda case: case[0],
)
def test_bad_adds_name_the_problem_and_change_nothing(case) -> None:
    _, batch, priorities, pattern = case
    spec = TransitionSpec.from_dict(
        {"obs": ((4,), "float32"), "action": ((), "int64"), "reward": ((), "float32")}
    )
    replay = PrioritizedReplay(spec, capacity=8, alpha=ALPHA, rng=0)
    replay.add(make_batch(spec, 6), np.arange(1.0, 7.0))
    before = snapshot(replay)
    with pytest.raises((InvalidBatchError, InvalidPriorityError), match=pattern):
        replay.add(batch, priorities)
    assert_unchanged(replay, before)


def test_bad_updates_and_samples_are_rejected(small_spec: TransitionSpec) -> None:
    replay = PrioritizedReplay(small_spec, capacity=8, alpha=ALPHA, rng=0)
    with pytest.raises(EmptyReplayError, match="empty"):
        replay.sample(4, BETA)
    replay.add(make_batch(small_spec, 8), np.ones(8))
    before = snapshot(replay)
    slots = np.arange(3)
    cases = [
        ((slots, slots[:2], np.ones(3)), InvalidIndexError, "3 indices but 2"),
        ((slots.astype(float), slots, np.ones(3)), InvalidIndexError, "float64"),
        ((slots, slots, np.ones(2)), InvalidPriorityError, r"shape \(3,\)"),
        ((slots, slots, np.array(["a", "b", "c"])), InvalidPriorityError, "numeric"),
    ]
    for args, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            replay.update_priorities(*args)
    assert_unchanged(replay, before)
    with pytest.raises(InvalidIndexError, match="batch_size"):
        replay.sample(0, BETA)
    with pytest.raises(InvalidPriorityError, match="beta"):
        replay.sample(4, -0.1)
    replay.update_priorities(np.arange(8), np.arange(8), np.zeros(8))
    with pytest.raises(EmptyReplayError, match="zero"):
        replay.sample(4, BETA)
    with pytest.raises(InvalidPriorityError, match="alpha"):
        PrioritizedReplay(small_spec, capacity=8, alpha=float("nan"))


def test_one_update_naming_unwritten_slots_changes_nothing_that_is_served(
    small_spec: TransitionSpec,
) -> None:
    """The reviewer's case: 8 items in 4,096 slots, then one update of slots 1000-1063
    with generation -1 and priority 1e6. It must be dropped whole (never written), and
    every later sample must return written rows only."""
    replay = PrioritizedReplay(small_spec, capacity=4096, alpha=ALPHA, rng=0)
    replay.add(make_batch(small_spec, 8), np.ones(8))
    total = replay.total_priority
    slots = np.arange(1000, 1064)
    dropped = replay.update_priorities(slots, np.full(64, -1), np.full(64, 1e6))
    assert dropped == 64
    assert replay.update_drops == {
        "out_of_range": 0,
        "never_written": 64,
        "stale": 0,
        "bad_priority": 0,
    }
    assert replay.total_priority == total
    sample = replay.sample(64, BETA)
    assert (sample.indices < 8).all() and (sample.generations >= 0).all()
    assert np.isfinite(sample.transitions["obs"]).all()
    np.testing.assert_array_equal(sample.transitions["action"], sample.indices)


def test_every_update_that_does_not_name_a_stored_item_is_dropped_by_reason(
    small_spec: TransitionSpec,
) -> None:
    """Capacity 8, 12 items written (slots 0-3 hold items 8-11, slots 4-7 items 4-7):
    each update below names its slot and item; only the last lands."""
    replay = PrioritizedReplay(small_spec, capacity=8, alpha=1.0, rng=0)
    replay.add(make_batch(small_spec, 12), np.ones(12))
    cases = [  # (slot, generation, priority, reason)
        (-1, 7, 2.0, "out_of_range"),
        (8, 8, 2.0, "out_of_range"),
        (2**40, 2**40, 2.0, "out_of_range"),
        (5, -1, 2.0, "never_written"),
        (4, 12, 2.0, "never_written"),  # the next item's generation: not written yet
        (4, 2**62, 2.0, "never_written"),
        (5, 6, 2.0, "never_written"),  # item 6 lives in slot 6, never in 5
        (1, 1, 2.0, "stale"),  # item 1 was overwritten by item 9
        (6, 6, np.nan, "bad_priority"),
        (6, 6, np.inf, "bad_priority"),
        (6, 6, -0.5, "bad_priority"),
        (7, 7, 5.0, None),
    ]
    before = replay.tree.leaves.copy()
    for slot, generation, priority, reason in cases:
        drops = replay.update_drops
        dropped = replay.update_priorities(
            np.array([slot]), np.array([generation]), np.array([priority])
        )
        assert dropped == (reason is not None), (slot, generation, priority)
        if reason is not None:
            assert replay.update_drops[reason] == drops[reason] + 1, reason
    expected = before.copy()
    expected[7] = 5.0
    np.testing.assert_array_equal(replay.tree.leaves, expected)
    assert replay.dropped_updates == len(cases) - 1
    # In one message: the good ones land, the bad ones are each counted.
    slots = np.array([0, 9, 3, 2])
    dropped = replay.update_priorities(slots, np.array([8, 9, 3, 10]), np.array([3.0, 1, 1, 0]))
    assert dropped == 2
    np.testing.assert_array_equal(replay.tree.get(np.array([0, 2])), [3.0, 0.0])


def test_a_sample_never_serves_a_slot_that_holds_nothing(small_spec: TransitionSpec) -> None:
    """If the tree ever gave an empty slot priority (a bug), sampling refuses it instead
    of serving its NaN sentinel row."""
    replay = PrioritizedReplay(small_spec, capacity=16, alpha=ALPHA, rng=0)
    replay.add(make_batch(small_spec, 4), np.ones(4))
    replay.tree.set_unchecked(np.array([10]), np.array([1e9]))  # what a bad update did
    with pytest.raises(ReplayError, match="slot 10, which holds nothing"):
        replay.sample(32, BETA)


def test_priority_overflow_after_the_exponent_is_rejected(small_spec: TransitionSpec) -> None:
    replay = PrioritizedReplay(small_spec, capacity=4, alpha=2.0, rng=0)
    with pytest.raises(InvalidPriorityError, match=r"alpha=2\.0"):
        replay.add(make_batch(small_spec, 1), np.array([1e300]))
    assert replay.size == 0


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("field", ["obs", "reward"])
def test_a_batch_holding_a_value_that_is_not_finite_is_refused(
    small_spec: TransitionSpec, field: str, value: float
) -> None:
    replay = PrioritizedReplay(small_spec, capacity=8, alpha=ALPHA, rng=0)
    replay.add(make_batch(small_spec, 2), np.ones(2))
    before = snapshot(replay)
    batch = make_batch(small_spec, 3, first_id=2)
    batch[field] = batch[field].copy()
    batch[field].reshape(-1)[1] = value
    with pytest.raises(InvalidBatchError, match=f"{field!r} holds a value that is not finite"):
        replay.add(batch, np.ones(3))
    assert_unchanged(replay, before)
