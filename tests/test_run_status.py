"""A run directory read back: `apex status`, the summary's history, and what `--resume`
refuses. The directory is written here the way a run writes it (config, metrics,
checkpoint, summary); `tests/test_train.py` reads a real run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from launch.cli import main
from launch.config import resolve, write_resolved
from launch.local.resume import TrainedSoFar
from launch.run_files import write_summary
from launch.views.status import run_status, status_lines
from tests.conftest import write_run_dir


def test_status_reads_outcome_evaluations_restarts_faults_and_checkpoint(tmp_path: Path) -> None:
    write_run_dir(tmp_path)
    write_summary(
        tmp_path,
        {
            "reason": "interrupted",
            "solved": False,
            "seconds": 12.0,
            "exit_code": 0,
            "learner_restarts": 0,
        },
    )
    write_summary(
        tmp_path,
        {
            "reason": "max_time",
            "solved": False,
            "seconds": 33.3,
            "exit_code": 0,
            "actor_restarts": 2,
            "learner_restarts": 1,
        },
    )
    result = CliRunner().invoke(main, ["status", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "ended: max_time after 33.3 s (exit code 0)" in out
    assert "earlier life: interrupted after 12.0 s" in out  # the first outcome is kept
    assert "evaluation: last 402.5, best 402.5 over 2 (target 475.0)" in out
    assert "2 actor processes = 16 Ape-X actors" in out
    assert "updates 1,200 in 30 s (41/s)" in out and "return (mean of the last 100): 123.5" in out
    assert "restarts: actor 2, shard 0, learner 1" in out
    assert "faults: checkpoints_failed 1" in out
    assert "checkpoint-0000001200.pt" in out
    as_json = json.loads(CliRunner().invoke(main, ["status", "--json", str(tmp_path)]).output)
    assert as_json == json.loads(json.dumps(run_status(tmp_path)))
    assert [life["reason"] for life in as_json["history"]] == ["interrupted"]


def test_status_of_a_run_with_nothing_yet_and_of_no_run(tmp_path: Path) -> None:
    write_resolved(resolve({}, {}), tmp_path / "run")
    result = CliRunner().invoke(main, ["status", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "running, or stopped without an outcome" in result.output
    assert "no progress recorded yet" in result.output and "checkpoint: none yet" in result.output
    result = CliRunner().invoke(main, ["status", str(tmp_path)])
    assert result.exit_code == 2 and "not a run directory" in result.output


def test_a_resume_past_its_limit_is_refused_with_the_figures(tmp_path: Path) -> None:
    write_run_dir(tmp_path)
    write_summary(
        tmp_path, {"reason": "max_time", "solved": False, "seconds": 33.3, "exit_code": 0}
    )
    before = (tmp_path / "summary.json").read_text()
    result = CliRunner().invoke(main, ["train", "--resume", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "already trained 30 s of its limit of 25 s" in result.output
    assert "give --max-time S to train S seconds more" in result.output
    assert (tmp_path / "summary.json").read_text() == before  # nothing started or erased
    assert not (tmp_path / "logs").exists()


def test_resume_limits_are_more_on_top_of_the_checkpoint(tmp_path: Path) -> None:
    write_run_dir(tmp_path)
    so_far = TrainedSoFar.read(tmp_path)
    assert (so_far.updates, so_far.train_seconds) == (1200, 30.0)
    assert so_far.more(500, 60.0) == (1700, 90.0)
    assert so_far.more(None, None) == (None, None)
    assert so_far.limit_reached(1700, 90.0) is None
    assert "already did 1200 updates of its limit of 1000" in so_far.limit_reached(1000, None)
    assert TrainedSoFar.read(tmp_path / "elsewhere") == TrainedSoFar()


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_summary_that_does_not_parse_starts_a_fresh_history(tmp_path: Path, damage) -> None:
    if damage == "garbage":
        (tmp_path / "summary.json").write_text("{not json")
    write_summary(tmp_path, {"reason": "solved", "solved": True})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["history"] == [] and summary["reason"] == "solved"


def test_status_and_curves_read_the_runs_end_and_a_resumed_runs_latest(tmp_path: Path) -> None:
    """The end record holds the run's last figures (a progress record is up to
    metrics_interval_s older); a resumed run's newer progress wins over an older end."""
    from apex.learning.metrics import MetricsWriter
    from launch.views.status import RunRecords, run_status

    write_run_dir(tmp_path, updates=1200, train_seconds=30.0)
    metrics = MetricsWriter(tmp_path)
    metrics.write(
        {
            "event": "evaluation",
            "time_s": 32.0,
            "updates": 1300,
            "eval_return_mean": 480.0,
            "eval_return_min": 400.0,
            "eval_return_max": 500.0,
        }
    )
    metrics.write(
        {
            "event": "end",
            "reason": "solved",
            "solved": True,
            "updates": 1333,
            "train_seconds": 33.0,
            "transitions_added": 50_000,
        }
    )
    metrics.close()
    status = run_status(tmp_path)
    assert (status["progress"]["updates"], status["progress"]["time_s"]) == (1333, 33.0)
    assert status["progress"]["transitions_added"] == 50_000
    timeline = RunRecords.read(tmp_path).timeline
    assert timeline[-1]["event"] == "end"  # curves.png reads env steps up to the end
    assert [r["time_s"] for r in timeline] == sorted(r["time_s"] for r in timeline)
    metrics = MetricsWriter(tmp_path)  # the run resumed: a second life, going on
    metrics.write({"event": "start", "updates": 1333, "device": "cpu"})
    metrics.write(
        {"event": "progress", "time_s": 40.0, "updates": 1500, "transitions_added": 60_000}
    )
    metrics.close()
    status = run_status(tmp_path)
    assert (status["progress"]["updates"], status["progress"]["time_s"]) == (1500, 40.0)
    assert RunRecords.read(tmp_path).timeline[-1]["event"] == "progress"


def test_status_names_the_confirmed_solve_and_never_an_unconfirmed_one(tmp_path: Path) -> None:
    from apex.learning.metrics import MetricsWriter

    write_run_dir(tmp_path)
    metrics = MetricsWriter(tmp_path)
    for mean, solved in ((470.0, False), (480.0, True)):
        metrics.write(
            {
                "event": "confirmation",
                "time_s": 21.0,
                "env_steps": 41_000,
                "episodes": 100,
                "eval_return_mean": mean,
                "solved": solved,
                "weights_time_s": 17.5,
            }
        )
    metrics.close()
    out = CliRunner().invoke(main, ["status", str(tmp_path)]).output
    assert (
        "solved: confirmed at 480.0 over 100 episodes, 41,000 env steps, weights "
        "published at 17.5 s of training, confirmed at 21.0 s"
    ) in out
    assert "470.0" not in out


def _run_whose_evaluator_died(run_dir: Path, ended: bool) -> None:
    from apex.learning.metrics import MetricsWriter

    write_resolved(resolve({}, {}), run_dir)
    metrics = MetricsWriter(run_dir)
    metrics.write(
        {"event": "start", "updates": 0, "device": "cpu", "actor_processes": 1, "ape_x_actors": 8}
    )
    dying = {"evaluator": "restarting", "evaluator_restarts": 2, "evaluator_last_exit": 3}
    metrics.write(
        {
            "event": "progress",
            "time_s": 9.0,
            "updates": 90,
            "updates_per_s": 10.0,
            "transitions_per_s": 100.0,
            "transitions_added": 900,
            "replay_sizes": [900],
            "episode_return_mean": 20.0,
            "policy_lag_median": 1.0,
            "shards_alive": 1,
            **dying,
        }
    )
    if ended:
        metrics.write(
            {
                "event": "end",
                "reason": "max_time",
                "solved": False,
                "updates": 100,
                "train_seconds": 10.0,
                "evaluations": 0,
                **dying,
                "evaluator": "given up",
                "evaluator_restarts": 5,
            }
        )
    metrics.close()


def test_an_evaluator_that_keeps_dying_is_a_fault_everywhere_a_run_is_shown(tmp_path) -> None:
    from launch.run_summary import RunSummary
    from launch.views.live_view import evaluation_text
    from launch.views.watch import RunWatch

    running, ended = tmp_path / "running", tmp_path / "ended"
    _run_whose_evaluator_died(running, ended=False)
    _run_whose_evaluator_died(ended, ended=True)
    watch = RunWatch(running)
    watch.poll()
    assert evaluation_text(watch) == (
        "eval none: the evaluator died (exit code 3), restart 2 / target 475.0"
    )
    lines = "\n".join(status_lines(run_status(running)))
    assert "faults: evaluator_restarts 2" in lines
    assert "evaluation: none yet (target 475.0): the evaluator died (exit code 3)" in lines
    lines = "\n".join(status_lines(run_status(ended)))
    assert "faults: evaluator_restarts 5, evaluator gave up" in lines
    assert (
        "evaluation: none ran (target 475.0): the evaluator gave up after 5 restarts "
        "(exit code 3): see logs/evaluator.log"
    ) in lines
    outcome = {
        "updates": 100,
        "evaluations": 0,
        "last_eval_return": None,
        "evaluator": "given up",
        "evaluator_restarts": 5,
        "evaluator_last_exit": 3,
    }
    line = RunSummary(0, "max_time", False, 10.0, outcome).line()
    assert "last eval: none ran | evaluator restarts: 5 (the evaluator gave up" in line
    # A healthy evaluator that had no time to evaluate is no fault.
    outcome.update(evaluator="up", evaluator_restarts=0)
    line = RunSummary(0, "max_time", False, 10.0, outcome).line()
    assert "last eval: none ran | actor restarts" in line


@pytest.mark.slow
def test_a_run_whose_evaluator_cannot_start_says_so_and_names_it_a_fault(tmp_path) -> None:
    """A real run of an env the actors can make and the evaluator cannot: the end line,
    the metrics and ``apex status`` all say the evaluator died and nothing evaluated."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        "--env",
        "tests.grid_env:GridThatFailsToEvaluate-v0",
        "--max-time",
        "8",
        "--plain",
        "--no-curves",
        "--run-dir",
        str(run_dir),
        "--set",
        "replay.min_size=200",
        "--set",
        "replay.capacity=5000",
        "--set",
        "learner.eval_every_steps=200",
        "--set",
        "learner.batch_size=32",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    end = done.stdout.strip().splitlines()[-2]
    assert "last eval: none ran | evaluator restarts: " in end, end
    assert "(the evaluator " in end
    lines = "\n".join(status_lines(run_status(run_dir)))
    assert "faults: evaluator_restarts" in lines and "evaluation: none ran" in lines
