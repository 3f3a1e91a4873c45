"""The lag study (``apex bench lag``): a held-back IMPALA run end to end, how the cases
are scored (times to a confirmed solve, the goal, returns at fixed times), the curves,
and a sitting resumed from its record without running its runs again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import report
from bench.learning import lag_report, lag_suite
from launch.cli import main


def fake_lag_run(
    lag: int, correction: bool, seed: int, solve_s: float | None, updates_per_s: float | None = 10.0
) -> dict:
    """A run that evaluates every 10 s of training from 5 s, at 100 + 10 s a second until
    its confirmed solve (at 480) at ``solve_s``, which ends it; ``updates_per_s`` None: a
    run recorded before the suite counted updates."""
    rate = updates_per_s or 10.0
    evaluations = [
        [float(t), 100 * t, rate * t, 100.0 + 10 * t]
        for t in range(5, 90, 10)
        if solve_s is None or t < solve_s
    ]
    confirmations = [] if solve_s is None else [[solve_s, 100 * solve_s, rate * solve_s, 480.0]]
    run = {
        "lag": lag,
        "correction": correction,
        "seed": seed,
        "budget_s": 90.0,
        "git": "0" * 40,
        "solved": solve_s is not None,
        "solve_s": solve_s,
        "evaluations": evaluations,
        "confirmations": confirmations,
        "target": 475.0,
        "trained_lag": float(lag),
    }
    if updates_per_s is not None:
        training_s = solve_s or 90.0
        run.update(
            solve_updates=rate * solve_s if solve_s else None,
            solve_env_steps=100 * solve_s if solve_s else None,
            updates=rate * training_s,
            training_s=training_s,
        )
    return run


@pytest.mark.slow
def test_a_held_back_impala_run_reports_its_solve_its_curve_and_the_lag_it_trained_on(
    tmp_path: Path,
) -> None:
    # Actors 5 versions behind, V-trace on, a short budget: the run ends either way.
    result = lag_suite.run_once("CartPole-v1", 5, True, 0, 8.0, tmp_path)
    assert result["solve_s"] is None or 0 < result["solve_s"] <= 8.0
    assert result["solved"] == (result["solve_s"] is not None) and result["target"] == 475.0
    # Its periodic evaluations, in training seconds, in order, make its curve.
    times = [e[0] for e in result["evaluations"]]
    assert times and times == sorted(times) and times[-1] <= 8.0 + 1.0
    # The learner trained on unrolls made by held-back actors: some lag, bounded by K, the
    # queue (4 batches) and what may be in flight (4 messages of a batch each), and more
    # than about K / 2 on the median.
    assert result["trained_lag"] is not None and 2 <= result["trained_lag"] <= 5 + 4 + 4 + 2
    # The updates it made in its training seconds, and those behind a solve's weights.
    assert result["updates"] > 0 and 0 < result["training_s"] <= 8.0 + 1.0
    if result["solved"]:
        assert 0 < result["solve_updates"] <= result["updates"] and result["solve_env_steps"] > 0


def test_the_lag_goal_compares_v_trace_iqms_at_k_20_and_the_least_k() -> None:
    fresh, lagged = [8.0, 9.0, 10.0, 11.0], [9.0, 10.0, 11.0, 90.0]  # one unsolved at 90
    interval = lag_suite._interval(lagged, 90.0)
    assert interval["iqm"] == pytest.approx(10.5) and not interval["iqm_lower_bound"]
    assert interval["iqm_ci95"][0] <= interval["iqm"] <= interval["iqm_ci95"][1]
    goal = lag_suite._goal(
        {(1, True): fresh, (20, True): lagged, (20, False): [1.0] * 4}, {}, 1, 90.0
    )
    assert goal["checked"] and goal["iqm_ratio"] == pytest.approx(10.5 / 9.5)
    assert not goal["met"] and 0 <= goal["p_lagged_sooner"] < 0.5 and "updates" not in goal
    low, high = goal["ratio_ci95"]
    assert low <= goal["iqm_ratio"] <= high and not goal["met_across_interval"]
    assert lag_suite._goal({(1, True): fresh}, {}, 1, 90.0) == {"checked": False}
    # Met across the interval only where its top is under the bar: tight, equal cases.
    tight = [10.0, 10.1, 10.2, 10.3, 10.4, 10.5, 10.6, 10.7]
    goal = lag_suite._goal({(1, True): tight, (20, True): tight}, {}, 1, 90.0)
    assert goal["met"] and goal["met_across_interval"] and goal["ratio_ci95"][1] <= 1.10
    # Spread cases meet the bar on the IQM and still not across the interval.
    spread = [4.0, 5.0, 5.0, 6.0, 14.0, 15.0, 16.0, 17.0]
    goal = lag_suite._goal({(1, True): spread, (20, True): spread}, {}, 1, 90.0)
    assert goal["met"] and not goal["met_across_interval"] and goal["ratio_ci95"][1] > 1.10
    # Unsolved lagged runs in the middle half make the ratio a lower bound: not met,
    # though the point ratio is under the bar.
    late, unsolved = [85.0, 86.0, 87.0, 88.0], [20.0, 90.0, 90.0, 90.0]
    goal = lag_suite._goal({(1, True): late, (20, True): unsolved}, {}, 1, 90.0)
    assert goal["iqm_ratio"] < 1.10 and not goal["met"] and not goal["met_across_interval"]
    # In updates: the lagged runs took as many (an unsolved one counts at what it made, so
    # the ratio is a lower bound once it sits in the middle half).
    counts = {
        (1, True): ([80.0, 90.0, 100.0, 110.0], [True] * 4),
        (20, True): ([85.0, 95.0, 100.0, 900.0], [True, True, True, False]),
    }
    goal = lag_suite._goal({(1, True): fresh, (20, True): lagged}, counts, 1, 90.0)
    assert goal["updates"]["iqm_ratio"] == pytest.approx(97.5 / 95.0)
    assert goal["updates"]["met"] and not goal["updates"]["lower_bound"]
    counts[(20, True)] = ([85.0, 900.0, 900.0, 900.0], [True, False, False, False])
    goal = lag_suite._goal({(1, True): fresh, (20, True): lagged}, counts, 1, 90.0)
    assert goal["updates"]["lower_bound"] and not goal["updates"]["met"]
    # Lag 0's own count a lower bound: no ratio.
    counts[(1, True)] = ([80.0, 900.0, 900.0, 900.0], [True, False, False, False])
    assert "updates" not in lag_suite._goal({(1, True): fresh, (20, True): lagged}, counts, 1, 90.0)


def test_a_resumed_sitting_runs_only_the_missing_runs_and_scores_them_all(monkeypatch) -> None:
    ran = []

    def fake_run_once(env, lag, correction, seed, budget_s, root):
        ran.append((lag, correction, seed))
        return fake_lag_run(lag, correction, seed, None if (lag, seed) == (20, 2) else 10.0 + seed)

    monkeypatch.setattr(lag_suite, "run_once", fake_run_once)
    kept = [fake_lag_run(0, True, seed, 10.0 + seed) for seed in range(3)]
    told = []
    result = lag_suite.run(
        lags=(0, 20),
        seeds=(0, 1, 2),
        budget_s=90.0,
        previous=kept,
        on_run=lambda runs: told.append(len(runs)),
    )
    assert (0, True, 0) not in ran and len(ran) == 9 and told == list(range(4, 13))
    records = {(r["case"], r["metric"]): r for r in result["records"]}
    solve = records[("CartPole-v1-k20-vtrace", "time_to_solve")]
    assert solve["per_seed"] == [10.0, 11.0, 90.0] and solve["unsolved"] == 1
    assert records[("CartPole-v1-k20-vtrace", "trained_lag")]["median"] == 20.0
    goal = result["config"]["goal"]
    assert goal["checked"] and goal["base_k"] == 0 and goal["lag_k"] == 20
    assert len(result["config"]["runs"]) == 12
    # Each correction's median time at K = 20 over its own at K = 0.
    assert {r["case"] for r in result["ratios"]} == {
        "CartPole-v1-k20-vtrace",
        "CartPole-v1-k20-no-correction",
    }


@pytest.mark.slow
def test_the_report_gives_returns_at_fixed_times_and_draws_each_k_side_by_side(
    tmp_path: Path,
) -> None:
    runs = [
        fake_lag_run(lag, correction, seed, 20.0 if lag == 0 else None)
        for lag in (0, 20)
        for correction in (True, False)
        for seed in range(4)
    ]
    document = report.new_document(Path("."))
    report.add_suite(
        document, "lag", lag_suite.summarize("CartPole-v1", (0, 20), range(4), 90.0, runs)
    )
    text = lag_report.markdown(document)
    # At 30 s the lock-step runs have solved (their confirmation, 480); the lagged ones
    # are at their newest evaluation (25 s: 350).
    row0 = next(
        line for line in text.splitlines() if line.startswith("| 0 (lock-step) | V-trace | 150")
    )
    row20 = next(line for line in text.splitlines() if line.startswith("| 20 | off | 150"))
    assert "at 30 s" in text and "| 480 [480, 480] |" in row0 and "| 350 [350, 350] |" in row20
    assert "4 of 4 |" in text and "- K = 20, off: 0: —, 1: —" in text
    # The goal's ratio with its interval: every lagged run unsolved at 90 s, lock-step's
    # all at 20 s.
    assert "**4.50×** [4.50, 4.50] (at most 1.10 asked: not met)" in text
    # Updates to the solve: lock-step 200 at 10 a second; the lagged ones unsolved at the
    # 900 they made, a lower bound.
    lines = text.splitlines()
    solve0 = next(line for line in lines if line.startswith("| 0 (lock-step) | V-trace | 0 |"))
    solve20 = next(line for line in lines if line.startswith("| 20 | off | 20 |"))
    assert solve0.endswith("| 200 [200, 200] | 10 |")
    assert solve20.endswith("| ≥ 900 [900, 900] | 10 |")
    (path,) = lag_report.plot(document, tmp_path)
    assert path.name == "lag-CartPole-v1.png" and path.stat().st_size > 0


def test_a_record_of_another_budget_or_env_is_refused_on_resume(tmp_path: Path) -> None:
    document = report.new_document(Path("."))
    report.add_suite(
        document,
        "lag",
        lag_suite.summarize("CartPole-v1", (0,), (0,), 90.0, [fake_lag_run(0, True, 0, 10.0)]),
    )
    record = tmp_path / "lag.json"
    record.write_text(json.dumps(document))
    for extra in (["--budget", "30"], ["--env", "Acrobot-v1"]):
        result = CliRunner().invoke(main, ["bench", "lag", "--resume", str(record), *extra])
        assert result.exit_code == 2 and "not " in result.output, result.output
    (tmp_path / "other.json").write_text("{}")
    result = CliRunner().invoke(main, ["bench", "lag", "--resume", str(tmp_path / "other.json")])
    assert result.exit_code == 2 and "not a lag record" in result.output


def test_runs_recorded_before_the_updates_were_counted_are_scored_on_time_only() -> None:
    runs = [
        fake_lag_run(lag, True, seed, 10.0 + seed, updates_per_s=None)
        for lag in (0, 20)
        for seed in range(3)
    ]
    document = report.new_document(Path("."))
    result = lag_suite.summarize("CartPole-v1", (0, 20), range(3), 90.0, runs)
    report.add_suite(document, "lag", result)
    assert not any(r["metric"] == "updates_to_solve" for r in result["records"])
    assert result["config"]["goal"]["checked"] and "updates" not in result["config"]["goal"]
    assert "| — | — |" in lag_report.markdown(document)
    # A lagged run that solves in as many seconds with twice the updates a second: the goal
    # is met on time and not in updates.
    runs = [fake_lag_run(0, True, seed, 10.0 + seed) for seed in range(4)] + [
        fake_lag_run(20, True, seed, 10.0 + seed, updates_per_s=20.0) for seed in range(4)
    ]
    goal = lag_suite.summarize("CartPole-v1", (0, 20), range(4), 90.0, runs)["config"]["goal"]
    assert goal["met"] and goal["updates"]["iqm_ratio"] == pytest.approx(2.0)
    assert not goal["updates"]["met"]
