"""Roles started by hand, as on several hosts without Slurm (launch/README.md): they train,
end with their learner (the actors told on the weights' PUB, the shards on the learner's
request channel), and leave a run directory the views read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launch.supervision.role_process import RoleProcess, stop_all
from tests.conftest import wait_for

START_S = 120.0


def _exit_code(role: RoleProcess, seconds: float, what: str) -> int:
    wait_for(lambda: role.poll() is not None, seconds, what, interval_s=0.1)
    return role.poll()


@pytest.mark.slow
def test_hand_started_roles_end_with_their_learner_and_leave_a_readable_run(tmp_path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('env = "CartPole-v1"\nactors = 1\n[learner]\nmax_time_s = 90.0\n')
    run_dir = tmp_path / "run"
    roles: list[RoleProcess] = []
    try:
        shard = RoleProcess.apex("replay", "--config", str(config), name="shard")
        roles.append(shard)
        ready = shard.await_ready(START_S)
        endpoints = f"{ready['insert']},{ready['request']}"
        learner = RoleProcess.apex(
            "learner",
            "--config",
            str(config),
            "--run-dir",
            str(run_dir),
            "--shard",
            endpoints,
            name="learner",
        )
        roles.append(learner)
        bound = learner.await_ready(START_S)
        actor = RoleProcess.apex(
            "actor",
            "--config",
            str(config),
            "--index",
            "0",
            "--weights",
            bound["weights"],
            "--episodes",
            bound["episodes"],
            "--shard",
            endpoints,
            name="actor",
        )
        roles.append(actor)
        assert _exit_code(learner, 150.0, "the learner to end") == 0
        # Told the run is over, the others stop by themselves, cleanly.
        assert _exit_code(actor, 30.0, "the actor to stop") == 0
        assert _exit_code(shard, 30.0, "the shard to stop") == 0
    finally:
        stop_all(roles, 10.0)
    shown = subprocess.run(
        [sys.executable, "-m", "launch", "status", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).parents[1],
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "solved: confirmed at" in shown.stdout, shown.stdout
