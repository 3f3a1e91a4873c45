"""`apex train` for real: CartPole with 2 shards and 2 actors in child processes.

The tests that read a finished run share one (``cartpole_run``), bound beyond loopback so
that it makes and uses its own keys; one of them resumes it.
Every wait polls a condition with a deadline."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apex.envs.families import env_shape
from apex.learning.metrics import read_metrics
from launch.builder import read_spec
from launch.supervision.processes import run_processes
from replay.store.snapshot import complete_snapshots, open_snapshot
from replay.wire.keys import load
from replay.wire.security import REFUSAL_REASONS

RANDOM_CARTPOLE_RETURN = 22.0


CARTPOLE_RUN_SECONDS = 18


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory) -> tuple[Path, str]:
    """One real ``apex train``, read by every test below that only reads a finished run's
    results: CartPole with 2 shards and 2 actors for about half a minute, bound beyond
    loopback, so that it also makes and uses its own CURVE keys. Returns its run directory
    and everything it printed."""
    run_dir = tmp_path_factory.mktemp("run") / "cartpole"
    # Progress records every 0.5 s: the run may solve CartPole within 2 s of training.
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        "--run-dir",
        str(run_dir),
        "--plain",
        "--no-curves",
        "--actors",
        "2",
        "--shards",
        "2",
        "--seed",
        "3",
        "--max-time",
        str(CARTPOLE_RUN_SECONDS),
        "--set",
        'host="0.0.0.0"',
        "--set",
        "learner.metrics_interval_s=0.5",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CARTPOLE_RUN_SECONDS + 120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return run_dir, done.stdout


def processes_of(run_dir: Path, role: str | None = None) -> list[int]:
    """PIDs of the run's processes (the supervisor included), or of one role."""
    return [pid for pid, r in run_processes(run_dir).items() if role in (None, r)]


def wait_until(process: subprocess.Popen, seen: list[str], condition, timeout_s: float, what: str):
    """Checks ``condition`` each time the run prints a line (progress comes every few
    seconds) or 0.2 s passes, until the deadline. Lines read go to ``seen``."""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            if selector.select(0.2):
                line = process.stdout.readline()
                if not line:
                    raise AssertionError(f"the run ended while waiting for {what}: {''.join(seen)}")
                seen.append(line)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def wait_for_progress(process: subprocess.Popen, seen: list[str], run_dir: Path) -> None:
    def trained() -> bool:
        return any(r.get("event") == "progress" for r in read_metrics(run_dir))

    wait_until(process, seen, trained, 90, "training progress")


def train(run_dir: Path, *arguments: str) -> subprocess.Popen:
    # No curves.png: tests/test_live_views.py checks the picture, here it is seconds of CPU.
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        "--run-dir",
        str(run_dir),
        "--no-curves",
        *arguments,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_a_short_run_learns_far_beyond_random(cartpole_run) -> None:
    run_dir, output = cartpole_run
    records = read_metrics(run_dir)
    evaluations = [r["eval_return_mean"] for r in records if r.get("event") == "evaluation"]
    assert evaluations and max(evaluations) >= 4 * RANDOM_CARTPOLE_RETURN, evaluations
    end = [r for r in records if r.get("event") == "end"][-1]
    assert end["reason"] in ("max_time", "solved")
    assert "reason: max_time" in output or "solved in" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 0
    assert not (run_dir / "curves.png").exists()  # --no-curves
    # The evaluator (a child of the learner's role, with the run's keys) kept the
    # preset's cadence in env steps, and only a confirmed solve ended the run.
    periodic = [r for r in records if r.get("event") == "evaluation"]
    steps = [r["env_steps"] for r in periodic]
    assert steps == sorted(steps) and steps[0] >= 2_000, steps
    confirmations = [r for r in records if r.get("event") == "confirmation"]
    if end["reason"] == "solved":
        solve = confirmations[-1]
        assert solve["solved"] and solve["episodes"] == 100 and solve["eval_return_mean"] >= 475
        assert any(
            r["weight_version"] == solve["weight_version"] and r["eval_return_mean"] >= 475
            for r in periodic
        )
        status = subprocess.run(
            [sys.executable, "-m", "launch", "status", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "solved: confirmed at" in status.stdout
    assert not any(r["solved"] for r in confirmations[:-1])
    assert (run_dir / "logs" / "evaluator.log").stat().st_size > 0


@pytest.mark.slow
def test_versions_advance_priorities_update_and_a_checkpoint_is_written(cartpole_run) -> None:
    run_dir, _ = cartpole_run
    progress = [r for r in read_metrics(run_dir) if r.get("event") == "progress"]
    # Progress records carry INFO counters up to a second old, and a run may solve within
    # two seconds: the shards' final snapshots have the exact counts.
    applied = [
        open_snapshot(complete_snapshots(run_dir / "replay" / f"shard-{i}")[0][1]).meta["shard"][
            "served"
        ][2]
        for i in range(2)
    ]
    assert sum(applied) > 0, applied
    # Actors act with fresh weights: their episodes say how many versions behind the
    # learner's they played. (Not the versions the shards took: behind a held rate limiter
    # they take the oldest batches in flight, and a run that solves at once may have
    # trained only on batches made before the first weights.)
    lags = [r["policy_lag_median"] for r in progress if r["policy_lag_median"] is not None]
    assert lags and min(lags) <= 10, progress
    assert all(size > 0 for size in progress[-1]["replay_sizes"])  # both shards got data
    assert list((run_dir / "checkpoints").glob("checkpoint-*.pt"))
    config = json.loads((run_dir / "config.json").read_text())
    assert config["actors"] == 2 and config["shards"] == 2
    # The spec was computed once, by the supervisor, for the shards to read.
    assert read_spec(run_dir) == env_shape("CartPole-v1").transition_spec()
    assert processes_of(run_dir) == []
    # Each shard wrote its whole replay when the run stopped.
    for index, size in enumerate(progress[-1]["replay_sizes"]):
        snapshots = complete_snapshots(run_dir / "replay" / f"shard-{index}")
        assert snapshots, index
        stored = open_snapshot(snapshots[0][1]).meta["storage"]["next_generation"]
        assert stored >= size > 0


@pytest.mark.slow
def test_resume_continues_from_the_checkpoint_counters(cartpole_run) -> None:
    run_dir, _ = cartpole_run
    before = [r for r in read_metrics(run_dir) if r.get("event") == "end"][-1]
    first = json.loads((run_dir / "summary.json").read_text())
    # On a resume the limits are more: 200 updates more, whatever the first run did. The
    # first run may have solved CartPole; an unreachable target keeps the resumed one from
    # stopping at its first evaluation, so only the update limit ends it.
    limits = ("--max-updates", "200", "--max-time", "600", "--target-return", "1e9")
    process = train(Path("unused"), "--resume", str(run_dir), *limits)
    output, _ = process.communicate(timeout=180)
    assert process.returncode == 0, output
    assert f"{before['updates']} updates and" in output and "resumed from" in output
    after = [r for r in read_metrics(run_dir) if r.get("event") == "end"][-1]
    assert after["reason"] == "max_updates", output
    assert after["updates"] >= before["updates"] + 200, output
    assert after["updates"] < before["updates"] + 400, output  # more, not a new total
    assert after["weight_version"] > before["weight_version"]
    # The first life's outcome is kept in the summary's history, not overwritten.
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reason"] == "max_updates"
    assert [life["reason"] for life in summary["history"]] == [first["reason"]]
    assert f"results in {run_dir}/: summary.json, metrics.jsonl" in output
    # The shards came back with what they held, not empty.
    for index in range(2):
        log = (run_dir / "logs" / f"shard-{index}.log").read_text()
        assert re.search(r"restored \S+: [1-9]\d* transitions", log), log[-2000:]


def kill_in_turn(process, run_dir: Path, kills: list[tuple[str, tuple | None, tuple | None]]):
    """Waits for training, then for each ``(role, before_kill, after_restart)`` kills the
    role's first process (kill -9) and waits for its replacement; then stops the run with
    SIGINT and returns everything it printed. ``before_kill`` and ``after_restart`` are
    extra ``(condition, what)`` to wait for, or None."""
    seen: list[str] = []
    try:
        wait_for_progress(process, seen, run_dir)
        for role, before_kill, after_restart in kills:
            if before_kill:
                wait_until(process, seen, before_kill[0], 30, before_kill[1])
            victims = processes_of(run_dir, role)
            os.kill(victims[0], signal.SIGKILL)
            wait_until(
                process,
                seen,
                lambda r=role, v=victims: set(processes_of(run_dir, r)) - set(v),
                30,
                f"a restarted {role}",
            )
            if after_restart:
                wait_until(process, seen, after_restart[0], 90, after_restart[1])
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
        return "".join(seen) + rest
    finally:
        if process.poll() is None:
            process.kill()


def more_updates(run_dir: Path, count: int):
    """True once the run has made ``count`` updates more than at the first call."""
    first: list[int] = []

    def check() -> bool:
        progress = [r for r in read_metrics(run_dir) if r.get("event") == "progress"]
        updates = progress[-1]["updates"] if progress else 0
        first[:] = first or [updates]
        return updates > first[0] + count

    return check


def shard_and_learner_kills(run_dir: Path, updates_after: int) -> list[tuple]:
    """:func:`kill_in_turn`'s kills of shard 0 once it has a snapshot (then
    ``updates_after`` more updates) and of the learner once it has a checkpoint (then
    training in its second life)."""

    def resumed_and_training() -> bool:
        records = read_metrics(run_dir)
        starts = [i for i, r in enumerate(records) if r.get("event") == "start"]
        return len(starts) == 2 and any(
            r.get("event") == "progress" and r["updates"] > records[starts[1]]["updates"]
            for r in records[starts[1] :]
        )

    snapshot = (lambda: complete_snapshots(run_dir / "replay" / "shard-0"), "a shard snapshot")
    checkpoint = (lambda: list((run_dir / "checkpoints").glob("*.pt")), "a periodic checkpoint")
    more = (more_updates(run_dir, updates_after), "updates after the shard's restart")
    resumed = (resumed_and_training, "training after the learner's restart")
    return [("shard", snapshot, more), ("learner", checkpoint, resumed)]


@pytest.mark.slow
def test_a_killed_actor_shard_and_learner_each_come_back_and_sigint_leaves_nothing(
    tmp_path: Path,
) -> None:
    """One run, three kills in turn (each role's recovery proved once, at the supervisor):
    an actor is restarted; a shard comes back from its snapshot and training goes on; the
    learner resumes from its checkpoint and trains on. Then SIGINT stops everything."""
    run_dir = tmp_path / "kills"
    # Snapshots and checkpoints every second, so that each victim has one when it dies.
    process = train(
        run_dir,
        "--actors",
        "2",
        "--max-time",
        "600",
        "--target-return",
        "1e9",
        "--set",
        "replay.snapshot_interval_s=1",
        "--set",
        "learner.checkpoint_interval_s=1",
    )
    output = kill_in_turn(
        process,
        run_dir,
        [
            ("actor", None, None),
            *shard_and_learner_kills(run_dir, 200),
        ],
    )
    assert process.returncode == 0, output
    assert "actor 0 died" in output and "restarting" in output
    assert "shard 0 died" in output and "from its newest snapshot" in output
    assert "learner 0 died" in output and "from its newest checkpoint" in output
    assert "actor restarts: 1 | shard restarts: 1 | learner restarts: 1" in output, output
    assert "reason: interrupted" in output
    log = (run_dir / "logs" / "shard-0.log").read_text()
    assert re.search(r"restored \S+: [1-9]\d* transitions", log), log[-2000:]
    second_start = [r for r in read_metrics(run_dir) if r.get("event") == "start"][1]
    assert second_start["updates"] > 0  # resumed, not from scratch
    assert list((run_dir / "checkpoints").glob("checkpoint-*.pt"))  # the final checkpoint
    assert processes_of(run_dir) == []


@pytest.mark.slow
def test_a_shard_past_its_restart_budget_is_given_up_and_the_run_goes_on(tmp_path: Path) -> None:
    run_dir = tmp_path / "shard-given-up"
    process = train(
        run_dir,
        "--shards",
        "2",
        "--max-time",
        "600",
        "--target-return",
        "1e9",
        "--set",
        "replay.restart_budget=0",
        "--set",
        "actor.reroute_after_s=2",
        "--set",
        "learner.metrics_interval_s=0.5",
    )
    seen: list[str] = []
    try:
        wait_for_progress(process, seen, run_dir)
        os.kill(processes_of(run_dir, "shard")[0], signal.SIGKILL)
        wait_until(
            process,
            seen,
            lambda: any("given up" in line for line in seen),
            30,
            "the shard given up",
        )
        wait_until(process, seen, more_updates(run_dir, 300), 90, "updates on the other shard")
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(seen) + rest
    assert process.returncode == 0, output
    assert "shard restarts: 0 (1 given up)" in output
    end = [r for r in read_metrics(run_dir) if r.get("event") == "end"][-1]
    # Batches the actors kept for the dead shard went to the live one.
    assert end["delivery"]["rerouted_batches"] >= 1, end["delivery"]
    assert processes_of(run_dir) == []


@pytest.mark.slow
def test_a_run_bound_beyond_loopback_gets_its_own_keys_and_trains(cartpole_run) -> None:
    run_dir, _ = cartpole_run  # bound to 0.0.0.0, given no keys
    keys = load(run_dir / "keys")  # made for the run, secrets private (load checks)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["security"] == {"keys": str((run_dir / "keys").absolute()), "insecure": False}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["security"] == "curve" and summary["outcome"]["updates"] > 0
    assert summary["refused"] == dict.fromkeys(REFUSAL_REASONS, 0)
    assert keys.admitted == {keys.client.public}
    progress = [r for r in read_metrics(run_dir) if r.get("event") == "progress"]
    assert progress and progress[-1]["refused"] == dict.fromkeys(REFUSAL_REASONS, 0)


def greedy_returns_of(checkpoint: Path, run_dir: Path, episodes: int, seed: int) -> list[float]:
    """First-episode returns on ``episodes`` evaluation copies of the run's env, each step's
    action the argmax of the checkpoint's online Q-network."""
    import numpy as np
    import torch

    from apex.algorithms.registry import build_algorithm
    from apex.envs.vector import evaluation_envs
    from apex.learning.checkpoint import LearnerCheckpoints
    from launch.config import read_resolved

    config = read_resolved(run_dir / "config.json")
    algorithm = build_algorithm(
        config.learner, config.algorithms, env_shape(config.env), torch.device("cpu")
    )
    LearnerCheckpoints.restore(checkpoint, algorithm)
    envs = evaluation_envs(config.env, episodes)
    returns, running = np.zeros(episodes), np.ones(episodes, dtype=bool)
    observations, _ = envs.reset(seed=seed)
    with torch.no_grad():
        while running.any():
            q = algorithm.online(torch.as_tensor(observations, dtype=torch.float32))
            observations, rewards, terminated, truncated, _ = envs.step(q.argmax(1).numpy())
            returns += rewards * running
            running &= ~(terminated | truncated)
    envs.close()
    return returns.tolist()


@pytest.mark.slow
def test_evaluate_plays_the_run_s_newest_checkpoint_greedily(cartpole_run, tmp_path) -> None:
    import importlib.util

    from click.testing import CliRunner

    from apex.learning.checkpoint import latest
    from launch.cli import main

    run_dir, _ = cartpole_run
    played = CliRunner().invoke(
        main, ["evaluate", str(run_dir), "--weights", "checkpoint", "--episodes", "4", "--json"]
    )
    assert played.exit_code == 0, played.output
    result = json.loads(played.output)
    # The run's target: CartPole's, or the unreachable one a resume of this run gave it.
    target = json.loads((run_dir / "config.json").read_text())["learner"]["target_return"]
    assert len(result["returns"]) == 4 and result["target"] == (target or 475.0)
    newest = latest(run_dir / "checkpoints")
    assert result["checkpoint"] == str(newest)
    # The returns are those of the checkpoint's online network acting by argmax, played
    # here without the acting policy: the trained weights, not some others, play greedily.
    assert result["returns"] == greedy_returns_of(newest, run_dir, episodes=4, seed=12345)
    # The same checkpoint and seeds play the same episodes.
    named = CliRunner().invoke(
        main, ["evaluate", str(run_dir), "--checkpoint", str(newest), "--episodes", "4", "--json"]
    )
    assert json.loads(named.output)["returns"] == result["returns"]
    text = (
        CliRunner()
        .invoke(main, ["evaluate", str(run_dir), "--weights", "checkpoint", "--episodes", "2"])
        .output
    )
    assert f"CartPole-v1, weights version {result['weights_version']} from {newest.name}: " in text
    assert f"(target {result['target']:g})" in text
    arguments = ["evaluate", str(run_dir), "--episodes", "1", "--video", str(tmp_path / "v")]
    recorded = CliRunner().invoke(main, arguments)
    if importlib.util.find_spec("moviepy") is None:  # the video extra
        assert recorded.exit_code == 2 and "--video needs moviepy" in recorded.output
    else:
        assert recorded.exit_code == 0, recorded.output
        assert list((tmp_path / "v").glob("*.mp4"))
