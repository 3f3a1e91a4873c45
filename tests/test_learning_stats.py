"""The learning benchmark's statistics (``bench.learning.learning_stats``) on hand-computed
cases."""

from __future__ import annotations

import numpy as np
import pytest

from bench.learning.learning_stats import (
    censored_iqm,
    iqm,
    pooled_iqm,
    probability_of_improvement,
    stratified_bootstrap_ci,
    wholly_worse,
)


def test_the_iqm_is_the_mean_of_the_middle_half() -> None:
    # 10 runs: 2 cut from each end (scipy.stats.trim_mean(x, 0.25) does the same).
    assert iqm([100, 1, 2, 3, 4, 5, 6, 7, 8, -50]) == pytest.approx(np.mean([2, 3, 4, 5, 6, 7]))
    assert iqm([3.0, 1.0, 2.0]) == pytest.approx(2.0)  # fewer than 4: nothing cut
    assert pooled_iqm({"a": [1, 2], "b": [3, 100]}) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        iqm([])
    with pytest.raises(ValueError):
        iqm([1.0, float("nan")])


def test_an_unsolved_run_in_the_middle_half_makes_the_iqm_a_lower_bound() -> None:
    times, budget = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0], 60.0
    assert censored_iqm(times, [True] * 8, budget) == {
        "iqm": pytest.approx(13.5),
        "unsolved": 0,
        "lower_bound": False,
    }
    # The slowest run unsolved: it is cut off the top, the IQM stands.
    tail = censored_iqm(times, [True] * 7 + [False], budget)
    assert tail == {"iqm": pytest.approx(13.5), "unsolved": 1, "lower_bound": False}
    # Half the runs unsolved reach into the middle half: a lower bound only.
    many = censored_iqm(times, [True] * 4 + [False] * 4, budget)
    assert many["lower_bound"] and many["iqm"] == pytest.approx(np.mean([12, 13, 60, 60]))


def test_the_bootstrap_interval_holds_the_estimate_and_keeps_each_task_s_runs_apart() -> None:
    rng = np.random.default_rng(3)
    scores = {"a": rng.normal(10, 2, 10), "b": rng.normal(50, 2, 10)}
    point, low, high = stratified_bootstrap_ci(scores, reps=500, seed=1)
    assert low <= point <= high and high - low < 20
    assert stratified_bootstrap_ci(scores, reps=500, seed=1) == (point, low, high)  # seeded
    # Constant runs: nothing to resample, the interval closes on the value.
    assert stratified_bootstrap_ci({"a": [4.0] * 5}, reps=100) == (4.0, 4.0, 4.0)
    # Stratified: every resample keeps 10 runs of each task, so the share of task b's
    # (large) runs, read through the mean, never moves.
    means = stratified_bootstrap_ci(
        {"a": [0.0] * 10, "b": [1.0] * 10},
        statistic=lambda s: float(np.mean(np.concatenate(list(s.values())))),
        reps=200,
    )
    assert means == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError):
        stratified_bootstrap_ci({"a": []})


def test_the_probability_of_improvement_counts_pairs_and_ties_half() -> None:
    assert probability_of_improvement({"t": [5, 6]}, {"t": [1, 2]}, higher_is_better=True) == 1.0
    assert probability_of_improvement({"t": [5, 6]}, {"t": [1, 2]}, higher_is_better=False) == 0
    assert probability_of_improvement({"t": [1, 2]}, {"t": [1, 2]}, higher_is_better=True) == 0.5
    # 3 > 2, 3 > 1, 1 = 1 (half), 1 < 2: (2 + 0.5) / 4; averaged with a task won outright.
    x, y = {"t": [3, 1], "u": [9]}, {"t": [1, 2], "u": [0], "only_y": [7]}
    assert probability_of_improvement(x, y, higher_is_better=True) == pytest.approx(
        (2.5 / 4 + 1.0) / 2
    )
    with pytest.raises(ValueError):
        probability_of_improvement({"a": [1]}, {"b": [1]}, higher_is_better=True)


def test_a_regression_is_an_interval_wholly_on_the_worse_side() -> None:
    old = (10.0, 14.0)  # times to solve, seconds
    assert wholly_worse((15.0, 20.0), old, higher_is_better=False)
    assert not wholly_worse((13.0, 20.0), old, higher_is_better=False)  # overlap
    assert not wholly_worse((5.0, 9.0), old, higher_is_better=False)  # better
    assert wholly_worse((5.0, 9.0), old, higher_is_better=True)  # returns: lower is worse
