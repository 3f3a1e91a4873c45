"""The scaling benchmark (``apex bench scaling``): what a run directory says about a run
(its solve at the weights' publication, its throughput), how points are scored (speedups
with intervals, efficiencies, what binds, the knee), and the command's refusals. The
sweep itself is a benchmark, never a timed test."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from apex.learning.metrics import MetricsWriter
from bench.learning.learning_stats import iqm
from bench.scaling import scaling_report, scaling_suite
from bench.scaling.scaling_runs import busy_cores, read_run, throughput
from bench.scaling.scaling_tasks import TASKS, ScalingTask, throughput_task
from launch.cli import main
from launch.run_files import write_summary

TASK = replace(TASKS["cartpole-sleep5ms"], budget_s=100.0, checkpoints_s=(10.0, 50.0))


def progress(
    time_s: float,
    env_steps: int,
    updates: int,
    learner_cpu_s: float,
    held: bool = False,
    waiting: int = 0,
    lag: float = 1.0,
) -> dict:
    shard = {
        "size": env_steps,
        "capacity": 100_000,
        "cpu_s": time_s / 10,
        "uptime_s": time_s,
        "inserts_waiting": held,
        "samples_waiting": waiting,
    }
    return {
        "event": "progress",
        "time_s": time_s,
        "env_steps": env_steps,
        "updates": updates,
        "learner_cpu_s": learner_cpu_s,
        "shards": [shard],
        "policy_lag_median": lag,
    }


def test_throughput_is_read_over_the_training_window() -> None:
    records = [
        {"event": "start", "actor_processes": 2},
        progress(1.0, 1_000, 0, 0.5),  # before the first update: not in the window
        {"event": "first_update", "time_s": 1.5},
        progress(2.0, 2_000, 10, 1.0, held=True),
        {**progress(4.0, 6_000, 110, 2.0, held=True, lag=3.0), "actors_heard": 1},
        {**progress(6.0, 10_000, 210, 3.0, waiting=4, lag=5.0), "actors_heard": 2},
    ]
    figures = throughput(records)
    assert figures["window_s"] == 4.0
    assert figures["env_steps_per_s"] == 2_000.0 and figures["updates_per_s"] == 50.0
    assert figures["learner_cores"] == 0.5 and figures["shard_cores"] == pytest.approx(0.1)
    assert figures["inserts_held"] == pytest.approx(2 / 3)
    assert figures["samples_waited"] == pytest.approx(1 / 3)
    assert figures["policy_lag_p50"] == 3.0 and figures["replay_fill"] == 0.1
    assert figures["first_update_s"] == 1.5 and figures["all_actors_heard_s"] == 6.0
    assert throughput(records[:4]) == {}  # one record of training: no window


def test_a_run_is_solved_at_the_publication_of_the_weights_its_confirmation_played(
    tmp_path: Path,
) -> None:
    metrics = MetricsWriter(tmp_path)
    metrics.write(progress(2.0, 2_000, 10, 1.0))
    metrics.write(progress(12.0, 12_000, 310, 6.0))
    for event, heard, published, mean in (
        ("evaluation", 9.0, 8.0, 300.0),
        ("evaluation", 14.0, 12.5, 490.0),
        ("confirmation", 17.0, 12.5, 481.0),
    ):
        metrics.write(
            {
                "event": event,
                "time_s": heard,
                "weights_time_s": published,
                "env_steps": int(1000 * published),
                "weights_updates": 300,
                "eval_return_mean": mean,
            }
        )
    metrics.close()
    write_summary(
        tmp_path,
        {
            "reason": "solved",
            "outcome": {
                "solved": True,
                "solved_at_s": 12.5,
                "solve_heard_at_s": 17.0,
                "train_seconds": 17.2,
                "updates": 400,
            },
        },
    )
    run = read_run(tmp_path, TASK)
    assert run["solved"] and (run["solve_s"], run["solve_heard_s"]) == (12.5, 17.0)
    assert run["solve_env_steps"] == 12_500 and run["solve_updates"] == 300
    assert [e[0] for e in run["evaluations"]] == [8.0, 12.5]  # at the weights' publication
    assert run["throughput"]["env_steps_per_s"] == 1_000.0


def point_runs(actors: int, times: list[float | None], rate: float, **figures) -> list[dict]:
    """Runs of one point: each solved at its time (None: unsolved), at ``rate`` env
    steps/s."""
    runs = []
    for seed, solve_s in enumerate(times):
        solved = solve_s is not None
        evaluations = [[1.0, 100, 10, 20.0]]
        runs.append(
            {
                "actors": actors,
                "seed": seed,
                "budget_s": TASK.budget_s,
                "solved": solved,
                "solve_s": solve_s,
                "solve_env_steps": 1000 if solved else None,
                "evaluations": evaluations,
                "confirmations": [[solve_s, 1000, 10, 480.0]] if solved else [],
                "machine_busy_cores": figures.get("busy", 0.3),
                "throughput": {
                    "env_steps_per_s": rate,
                    "updates_per_s": rate / 32,
                    "inserts_held": figures.get("held", 0.0),
                    "samples_waited": figures.get("waited", 1.0),
                },
            }
        )
    return runs


def test_points_are_scored_with_speedups_efficiencies_the_binding_and_the_knee() -> None:
    runs = (
        point_runs(1, [80.0, 90.0, 100.0, 110.0, 120.0], 200.0)
        + point_runs(2, [40.0, 45.0, 50.0, 55.0, 60.0], 400.0)
        + point_runs(4, [25.0, 30.0, 35.0, 40.0, 45.0], 790.0, held=0.9, waited=0.0)
        + point_runs(8, [20.0, 25.0, 30.0, 35.0, None], 1_000.0, busy=1.95)
    )
    scored = scaling_suite.score(TASK, runs, cores=2)
    points = {p["actors"]: p for p in scored["points"]}
    assert points[2]["speedup_vs_1"]["speedup"] == pytest.approx(2.0)
    assert points[2]["speedup_vs_1"]["efficiency"] == pytest.approx(1.0)
    low, high = points[2]["speedup_vs_1"]["ci_low"], points[2]["speedup_vs_1"]["ci_high"]
    assert low < 2.0 < high  # the interval resamples both points' runs
    assert points[4]["speedup_vs_2"]["speedup"] == pytest.approx(50.0 / 35.0)
    assert points[4]["step_efficiency"] == pytest.approx(790.0 / 800.0)
    assert points[2]["bound_by"].startswith("env steps")
    assert points[4]["bound_by"].startswith("learner")
    assert points[8]["bound_by"].startswith("machine (all 2 cores busy")
    assert points[8]["solved"] == 4 and "speedup_vs_1" in points[8]
    # 8 actors: 100 / 30 = 3.3x of 8 (0.42) is the first below 0.6.
    assert scored["knee"]["actors"] == 8 and scored["knee"]["bound_by"].startswith("machine")
    [time_at_8] = [
        r
        for r in scored["records"]
        if r["metric"] == "time_to_confirmed_solve" and r["params"]["actors"] == 8
    ]
    assert time_at_8["unsolved"] == 1 and time_at_8["params"]["values"][-1] == TASK.budget_s
    assert not any(
        r["metric"] == "env_steps_to_confirmed_solve" and r["params"]["actors"] == 8
        for r in scored["records"]
    )  # an unsolved run: no step count
    ratios = {(r["numerator"], r["denominator"]): r for r in scored["ratios"]}
    assert ratios[("1 actor", "8 actors")]["efficiency"] == pytest.approx(
        points[8]["speedup_vs_1"]["efficiency"]
    )


def test_the_report_has_a_row_per_point_and_names_the_knee(tmp_path: Path) -> None:
    runs = point_runs(1, [100.0] * 3, 200.0) + point_runs(16, [50.0] * 3, 3_000.0, held=1.0)
    scored = scaling_suite.score(TASK, runs, cores=2)
    config = {"task": vars(TASK), "cores": 2, "points": scored["points"], "knee": scored["knee"]}
    document = {
        "git": {"commit": "abcdef0"},
        "records": scored["records"],
        "suites": {"scaling": {"config": config}},
    }
    text = scaling_report.markdown(document)
    assert "| 16 | – | 3/3 | 50.0 [50.0, 50.0] | 2.0× [2.0, 2.0] (eff. 0.12)" in text
    assert "Knee: 16 actors, learner" in text
    assert scaling_report.plot(document, tmp_path).exists()


def test_busy_cores_are_the_share_of_ticks_not_idle() -> None:
    assert busy_cores((100, 1000), (400, 2000), cores=2) == pytest.approx(0.6)
    assert busy_cores((5, 5), (5, 5), cores=2) == 0.0


def test_a_task_with_a_bad_cost_is_refused() -> None:
    with pytest.raises(ValueError, match="cost_kind must be one of"):
        ScalingTask("bad", "CartPole-v1", 0.001, "gpu", 475.0, 10.0)


def test_the_train_settings_keep_the_preset_and_make_it_through_the_step_cost() -> None:
    settings = dict(s.split("=", 1) for s in TASK.train_settings())
    assert settings["env.make"] == '"bench.scaling.step_cost:make"'
    assert settings["env.kwargs.cost_kind"] == '"sleep"'
    assert settings["learner.eval_stepping"] == '"threads"'
    assert settings["learner.eval_lanes"] == "4"


def test_resuming_from_another_task_or_no_record_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps({"suites": {"scaling": {"config": {"task": {"name": "x"}, "runs": []}}}})
    )
    junk = tmp_path / "junk.json"
    junk.write_text("[]")
    for path, match in ((other, "holds x, not cartpole-sleep5ms"), (junk, "not a scaling record")):
        result = CliRunner().invoke(main, ["bench", "scaling", "--resume", str(path)])
        assert result.exit_code == 2 and match in result.output


def test_runs_across_hosts_and_on_one_host_resume_only_their_own(tmp_path: Path) -> None:
    from bench.scaling.scaling_command import previous_runs

    runs = point_runs(32, [20.0, 30.0], 5_000.0)
    runs[1]["hosts"] = ["learner", "shard", "actor"]
    record = tmp_path / "mixed.json"
    config = {"task": {"name": TASK.name}, "runs": runs}
    record.write_text(json.dumps({"suites": {"scaling": {"config": config}}}))
    assert [r["seed"] for r in previous_runs((record,), TASK.name)] == [0]
    assert [r["seed"] for r in previous_runs((record,), TASK.name, hosts=True)] == [1]


@pytest.mark.slow
def test_the_stepping_suite_measures_every_mode_against_its_ideal() -> None:
    """Plumbing and schema (a benchmark, never a speed check): every mode of one actor's
    copies on a sleep task and a CPU task, with the ideal each can reach here."""
    from bench.scaling import stepping_suite

    tasks = [
        replace(TASK, name="t-sleep", cost_s=0.002),
        replace(TASK, name="t-cpu", cost_s=0.001, cost_kind="cpu"),
    ]
    result = stepping_suite.run(tasks, copies=2, seconds=0.1, repeats=1)
    records = {(r["case"], r["implementation"]): r for r in result["records"]}
    assert set(records) == {
        (t, m) for t in ("t-sleep", "t-cpu") for m in ("serial", "threads", "processes")
    }
    assert records[("t-sleep", "threads")]["params"]["ideal_steps_per_s"] == 1000.0
    assert records[("t-sleep", "serial")]["params"]["ideal_steps_per_s"] == 500.0
    assert records[("t-cpu", "threads")]["params"]["ideal_steps_per_s"] == 1000.0
    assert all(r["median"] > 0 for r in result["records"])
    assert [(r["case"], r["numerator"]) for r in result["ratios"]] == [
        ("t-sleep", "threads"),
        ("t-sleep", "processes"),
        ("t-cpu", "threads"),
        ("t-cpu", "processes"),
    ]
    document = {
        "schema": "apex-bench/1",
        "machine": {},
        "packages": {},
        "git": {},
        "suites": {"stepping": {"config": result["config"]}},
        "records": result["records"],
        "ratios": result["ratios"],
    }
    from bench import report

    assert report.validate(document) == []


def test_a_weak_sweep_grows_the_batch_past_its_count_and_reuses_only_runs_that_fit() -> None:
    weak = replace(TASK, weak_from=16)
    assert [weak.batch_size(n) for n in (1, 16, 32, 64)] == [64, 64, 128, 256]
    assert "learner.batch_size=128" in weak.train_settings(32)
    assert not any(s.startswith("learner.batch_size") for s in weak.train_settings(16))
    strong = point_runs(16, [50.0], 3_000.0) + point_runs(32, [40.0], 5_000.0)
    for run in strong:
        run["batch_size"] = 64
    kept = scaling_suite.run(
        weak,
        counts=(16, 32),
        seeds=(0,),
        previous=strong,
        warm_up=False,
        runner=lambda task, n, seed, cores: {
            **point_runs(n, [30.0], 6_000.0)[0],
            "batch_size": 128,
        },
    )
    runs = kept["config"]["runs"]
    assert [(r["actors"], r["batch_size"]) for r in runs] == [(16, 64), (32, 128)]


def test_rates_are_read_from_when_every_actor_is_running() -> None:
    records = [
        {"event": "start", "actor_processes": 2},
        {"event": "first_update", "time_s": 0.5},
        {**progress(1.0, 1_000, 10, 0.5), "actors_heard": 1},  # one actor still starting
        {**progress(4.0, 2_000, 40, 1.0), "actors_heard": 2},
        {**progress(8.0, 10_000, 240, 3.0), "actors_heard": 2},
    ]
    figures = throughput(records)
    assert figures["window_s"] == 4.0 and figures["env_steps_per_s"] == 2_000.0
    assert figures["updates_per_s"] == 50.0 and figures["all_actors_heard_s"] == 4.0


def test_a_throughput_sweep_trains_the_whole_budget_and_reports_rates_alone() -> None:
    task = throughput_task(TASK, 60.0)
    assert task.budget_s == 60.0 and task.throughput_only
    assert "learner.stop_when_solved=false" in task.train_settings(8)
    assert "learner.stop_when_solved=false" not in TASK.train_settings(8)
    runs = point_runs(1, [None], 200.0) + point_runs(64, [None], 6_400.0, held=0.9, waited=0.0)
    for run in runs:
        run.update(budget_s=60.0, throughput_only=True)
    scored = scaling_suite.score(task, runs, cores=2)
    metrics = {r["metric"] for r in scored["records"]}
    assert "env_steps_per_s" in metrics and "time_to_confirmed_solve" not in metrics
    assert scored["ratios"] == []
    points = {p["actors"]: p for p in scored["points"]}
    assert points[64]["step_efficiency"] == pytest.approx(0.5)
    assert scored["knee"]["actors"] == 64 and scored["knee"]["bound_by"].startswith("learner")
    # A throughput run of another length, or a run to a solve, is not reused.
    previous = [
        *runs,
        {**runs[0], "budget_s": 30.0, "seed": 1},
        {**point_runs(1, [50.0], 200.0)[0], "seed": 2},
    ]
    made = []
    scaling_suite.run(
        task,
        counts=(1,),
        seeds=(0, 1, 2),
        previous=previous,
        warm_up=False,
        runner=lambda task, n, seed, cores: (
            made.append(seed)
            or {**point_runs(n, [None], 200.0)[0], "seed": seed, "throughput_only": True}
        ),
    )
    assert made == [1, 2]


def baseline_runs(times: list[float | None]) -> list[dict]:
    return [
        {
            "peer": "sb3-dqn",
            "seed": seed,
            "copies": 2,
            "budget_s": TASK.budget_s,
            "solved": solve_s is not None,
            "solve_s": solve_s,
            "solve_env_steps": 40_000 if solve_s is not None else None,
            "evaluations": [],
            "confirmations": [],
            "env_steps": 30_000,
            "train_s": 100.0,
        }
        for seed, solve_s in enumerate(times)
    ]


def test_points_are_sped_up_against_the_single_node_baseline(tmp_path: Path) -> None:
    runs = point_runs(1, [80.0] * 3, 200.0) + point_runs(8, [10.0] * 3, 1_600.0)
    runs += baseline_runs([90.0, 90.0, None])  # one unsolved: counted at the budget, 100 s
    scored = scaling_suite.score(TASK, runs, cores=2)
    baseline = scored["baseline"]
    assert baseline["solved"] == 2 and baseline["copies"] == 2
    assert baseline["env_steps_per_s"] == 300.0
    points = {p["actors"]: p for p in scored["points"]}
    assert set(points) == {1, 8}  # the baseline is no actor count
    expected = iqm([90.0, 90.0, 100.0]) / 10.0
    assert points[8]["speedup_vs_baseline"]["speedup"] == pytest.approx(expected)
    ratios = [r for r in scored["ratios"] if r["numerator"].startswith("sb3-dqn")]
    assert [r["denominator"] for r in ratios] == ["1 actors", "8 actors"]
    [record] = [r for r in scored["records"] if r["implementation"] == "sb3-dqn"]
    assert record["unsolved"] == 1 and record["params"]["copies"] == 2
    config = {
        "task": vars(TASK),
        "cores": 2,
        "points": scored["points"],
        "knee": scored["knee"],
        "baseline": baseline,
    }
    document = {"git": {}, "records": scored["records"], "suites": {"scaling": {"config": config}}}
    text = scaling_report.markdown(document)
    assert "Single-node baseline (sb3-dqn, 2 env copies in processes): 2/3 solved" in text
    assert f"8 actors {expected:.1f}×" in text


def test_the_baseline_runs_every_seed_once_across_sittings() -> None:
    made = []

    def baseline_runner(task, seed, cores):
        made.append(seed)
        return baseline_runs([50.0])[0] | {"seed": seed}

    result = scaling_suite.run(
        TASK,
        counts=(1,),
        seeds=(0, 1),
        previous=[*point_runs(1, [80.0, 80.0], 200.0), baseline_runs([60.0])[0]],
        warm_up=False,
        runner=lambda *args: pytest.fail("no apex run is missing"),
        baseline_seeds=(0, 1),
        baseline_runner=baseline_runner,
    )
    assert made == [1]
    assert result["config"]["baseline"]["seeds"] == 2


@pytest.mark.slow
def test_the_baseline_runs_sb3_on_copies_that_pay_the_step_cost() -> None:
    from bench.scaling.baseline import run_baseline

    # A target random play reaches: the confirmation path, timed without the evaluations.
    task = replace(
        TASK, budget_s=20.0, eval_every_steps=200, eval_episodes=2, confirm_episodes=2, target=9.0
    )
    run = run_baseline(task, seed=0, cores=2)
    assert "error" not in run, run.get("error")
    assert run["solved"] and run["copies"] == 2
    solve_s = run["solve_s"]
    assert 0.0 < solve_s < run["train_s"] <= run["wall_s"]
    # 200 env steps from 2 copies at 5 ms a step in processes of their own: 0.5 s or more.
    assert run["solve_env_steps"] >= 200 and solve_s >= 0.5


def test_a_run_across_hosts_is_a_slurm_job_with_every_role_on_its_host(tmp_path: Path) -> None:
    from bench.scaling.hosts import submit_command

    command = submit_command(TASK, 32, 3, tmp_path / "run")
    assert command[1:5] == ["-m", "launch", "slurm", "submit"]
    assert command[command.index("--actors-per-node") + 1] == "32"
    assert 'slurm.actor_options=["--nodelist=actor"]' in command
    result = CliRunner().invoke(main, [*command[3:], "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "--nodelist=learner" in result.output and "--nodelist=shard" in result.output


def test_a_jobs_outcome_is_read_from_its_output(tmp_path: Path) -> None:
    from bench.scaling.hosts import job_outcome

    assert job_outcome(tmp_path) is None
    outcome = {"reason": "solved", "solved": True, "solved_at_s": 21.5}
    (tmp_path / "slurm-9.out").write_text(
        "0: starting\n"
        '0: {"outcome": {"reason": "stopped"\n'  # cut short: not an outcome
        f"0: {json.dumps({'outcome': outcome})}\n"
        "2: actor 0 done\n"
    )
    assert job_outcome(tmp_path) == outcome
