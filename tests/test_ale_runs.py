"""ALE games beyond Pong, one by its gymnasium id and one by its bare name: each starts
on the atari family's settings, trains through ale-py's vector env with frames stored
once, is evaluated on unclipped rewards, and ends cleanly (Pong's run is the GPU check's,
``scripts/gpu_check.sh``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from apex.envs.families import stacks_frames
from apex.learning.metrics import read_metrics
from launch.builder import read_spec

# Small enough for two runs side by side on 2 busy cores: one actor of 4 envs, a replay of
# 20,000 frames, evaluation every 1,000 env steps on one episode. A target of 0 (every
# return reaches it) with no confirmation makes the first evaluation end the run; the
# time limit only bounds a broken one. An untrained greedy network loses both games'
# lives within seconds (Freeway's timer would hold its evaluation for 2,048 steps), so
# the first evaluation ends soon.
SMALL = (
    "actors=1",
    "actor.envs_per_actor=4",
    "replay.capacity=20_000",
    "replay.min_size=200",
    "learner.batch_size=32",
    "learner.eval_every_steps=1_000",
    "learner.eval_episodes=1",
    "learner.confirm_episodes=0",
)


@pytest.mark.slow
def test_two_ale_games_train_evaluate_and_end_cleanly(tmp_path: Path) -> None:
    pytest.importorskip("ale_py")
    runs = {}
    for env in ("ALE/SpaceInvaders-v5", "Qbert"):
        run_dir = tmp_path / env.replace("/", "_")
        command = [
            sys.executable,
            "-m",
            "launch",
            "train",
            "--env",
            env,
            "--max-time",
            "150",
            "--target-return",
            "0",
            "--plain",
            "--no-curves",
            "--run-dir",
            str(run_dir),
            *(part for setting in SMALL for part in ("--set", setting)),
        ]
        runs[env] = (
            run_dir,
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        )
    for env, (run_dir, process) in runs.items():
        assert stacks_frames(env)  # the atari family's: frames stored once
        output, _ = process.communicate(timeout=240)
        assert process.returncode == 0, output[-3000:]
        records = read_metrics(run_dir)
        start = next(r for r in records if r["event"] == "start")
        assert start["algorithm"] == "DoubleDQN"
        evaluations = [r for r in records if r.get("event") == "evaluation"]
        assert evaluations, output[-2000:]
        assert all(r["eval_return_mean"] >= 0 for r in evaluations)  # points, unclipped
        end = next(r for r in records if r.get("event") == "end")
        assert end["reason"] == "solved" and end["updates"] > 0
        spec = read_spec(run_dir)
        assert (spec["obs"].shape, spec["obs"].dtype) == ((4, 84, 84), np.uint8)
