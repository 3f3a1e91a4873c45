"""Every usage error is exit code 2 with one clear line and no traceback, found before
anything starts (no run directory, no child process); and a role that still fails at its
start is reported with its own reason, not "see the log".

One table: each bad input a user or operator can give, the command, and the words its
refusal must carry (the setting, the value, what is allowed).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from launch.cli import main
from launch.supervision.log_reasons import last_error_line, role_failure

NOT_A_RUN = "{tmp}/not-a-run"
NO_CHECKPOINT = "{tmp}/no-checkpoint"
SHARD = "tcp://127.0.0.1:1,tcp://127.0.0.1:2"

# fmt: off
CASES = [
    ("alpha", ["train", "--set", "replay.alpha=-1"],
     "replay.alpha must be a finite number >= 0, got -1"),
    ("no hidden layers", ["train", "--set", "actor.hidden=[]", "--set", "learner.hidden=[]"],
     "actor.hidden must be 1 to 16 layer widths"),
    ("huge layer", ["train", "--set", "actor.hidden=[10000000]",
                    "--set", "learner.hidden=[10000000]"], "each 1 to 65536, got [10000000]"),
    ("learning rate type", ["train", "--set", "learner.learning_rate=abc"],
     "learner.learning_rate must be a number, got 'abc'"),
    ("flag type", ["train", "--set", "dpg.twin_critics=maybe"],
     "dpg.twin_critics must be true or false, got 'maybe'"),
    ("count type", ["train", "--set", "replay.capacity=big"],
     "replay.capacity must be an integer, got 'big'"),
    ("frames on vectors", ["train", "--set", "replay.frames=true"],
     "replay.frames is on, but CartPole-v1's observations are no image stack"),
    ("shard share", ["train", "--shards", "3", "--set", "replay.capacity=2"],
     "replay.min_size=2000 must be in [1, capacity=2]"),
    ("replay memory", ["train", "--set", "replay.capacity=30_000_000_000"],
     "GiB at start (1 shard(s), 30,000,000,000 slots in all × 74 bytes a slot"),
    ("env factory form", ["train", "--set", "env.make=nothing"],
     "[env] make 'nothing' is not package.module:function"),
    ("env factory module", ["train", "--set", "env.make=nowhere.at_all:make"],
     "[env] make 'nowhere.at_all:make': cannot import nowhere.at_all"),
    ("env factory name", ["train", "--set", "env.make=examples.grid_world:nothing"],
     "examples.grid_world has no nothing"),
    ("env factory raises", ["train", "--set", "env.make=examples.grid_world:make",
                            "--set", "env.kwargs.size=1"],
     "raised ValueError: size must be in [2, 64], got 1"),
    ("env factory returns", ["train", "--set", "env.make=examples.grid_world:best_return",
                             "--set", "env.kwargs.size=3"],
     "returned a float, not a gymnasium.Env"),
    ("env table", ["train", "--set", "env.kwargs=4"], "[env] needs an id"),
    ("network form", ["train", "--set", "learner.network=nothing"],
     "learner.network 'nothing' is not package.module:function"),
    ("network outputs", ["train", "--set", "learner.network=tests.user_networks:wrong_width"],
     "learner.network gives (2, 3) for 2 observations; this algorithm needs q of (2, 2)"),
    ("network outputs for impala", ["train", "--set", "algorithm=impala", "--set",
                                    "learner.network=examples.grid_network:q_network"],
     "this algorithm needs logits and values of (2, 2) and (2,)"),
    ("network raises", ["train", "--set", "learner.network=tests.user_networks:raises"],
     "learner.network 'tests.user_networks:raises' raised RuntimeError: no network today"),
    ("network not a module", ["train", "--set",
                              "learner.network=tests.user_networks:not_a_module"],
     "returned a str, not a torch.nn.Module"),
    ("network for dpg", ["train", "--env", "Pendulum-v1", "--set",
                         "learner.network=examples.grid_network:q_network"],
     "a user's network is for DQN and IMPALA"),
    ("actor network", ["train", "--set", "actor.network=examples.grid_network:q_network"],
     "actor.network is learner.network's: set learner.network alone"),
    ("image no network takes", ["train", "--env", "tests.space_envs:Specks-v0"],
     "has observations of shape (3, 3): the built-in networks take flat (d,) vectors and "
     "uint8 images of 4x4 and up"),
    ("observation space", ["train", "--env", "tests.space_envs:Words-v0"],
     "has observations of Text"),
    ("host", ["train", "--set", "host=192.0.2.1"],
     "host '192.0.2.1' cannot be bound on this machine"),
    ("unknown section", ["train", "--set", "nonsense.key=1"], "nonsense"),
    ("resume a non-run", ["train", "--resume", NOT_A_RUN], "is not a run directory"),
    ("status", ["status", NOT_A_RUN], "is not a run directory (no config.json)"),
    ("plot", ["plot", NOT_A_RUN], "is not a run directory (no config.json)"),
    ("evaluate", ["evaluate", NOT_A_RUN], "is not a run directory (no config.json)"),
    ("evaluate episodes", ["evaluate", NOT_A_RUN, "--episodes", "0"], "0 is not in the range"),
    ("top", ["top", NOT_A_RUN, "--once"], "is not a run directory (no config.json)"),
    ("slurm status", ["slurm", "status", NOT_A_RUN], "is not a run directory (no config.json)"),
    ("slurm cuda without gpus", ["slurm", "submit", "--dry-run", "--set", "learner.device=cuda"],
     "learner.device 'cuda' needs slurm.learner_gpus >= 1, got 0"),
    ("slurm layout", ["slurm", "submit", "--dry-run", "--set", "slurm.layout=mesh"],
     "slurm.layout must be hetjob or multi-prog"),
    ("learner resume", ["learner", "--run-dir", NO_CHECKPOINT, "--resume", "--shard", SHARD],
     "--resume: no usable checkpoint in"),
    ("replay alpha", ["replay", "--alpha", "-1"], "-1.0 is not in the range x>=0"),
    ("replay field", ["replay", "--field", "obs:4"], "is not NAME:SHAPE:DTYPE"),
    ("actor index", ["actor", "--index", "5", "--shard", SHARD, "--weights", "tcp://a:1",
                     "--episodes", "tcp://a:2"], "index 5 but the config has 1 actors"),
    ("bench fuzz count", ["bench", "fuzz", "--messages", "5"], "5 is not in the range x>=100"),
]
# fmt: on
if not torch.cuda.is_available():
    CASES.append(
        (
            "cuda without one",
            ["train", "--device", "cuda"],
            "learner.device 'cuda' asks for CUDA, but torch",
        )
    )


@pytest.mark.parametrize(("arguments", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_usage_error_is_exit_2_with_its_reason_and_nothing_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arguments: list[str], said: str
) -> None:
    monkeypatch.chdir(tmp_path)  # a run directory would appear under runs/ here
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "no-checkpoint").mkdir()
    arguments = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert said in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-checkpoint", "not-a-run"]
    assert not any((tmp_path / "no-checkpoint").iterdir())  # no checkpoint, log or metrics


def test_a_role_that_fails_at_start_is_reported_with_its_own_reason(tmp_path: Path) -> None:
    """Past every check in the parent, a shard that refuses its bind (an address beyond
    loopback without keys, as a config given straight to the supervisor has): the run's
    summary carries the shard's own error line, and no empty curves.png is left."""
    from launch.config import resolve
    from launch.local.supervisor import Supervisor

    config = resolve({}, {"host": "0.0.0.0", "actors": 1})
    lines: list[str] = []
    summary = Supervisor(config, tmp_path / "run", False, lines.append).run()
    assert summary.exit_code == 3, summary
    assert "did not start (exit code 2): Error:" in summary.reason, summary.reason
    assert "keys" in summary.reason and "(log: " in summary.reason, summary.reason
    assert not (tmp_path / "run" / "curves.png").exists()


def test_the_error_line_of_a_log_is_the_roles_own_reason(tmp_path: Path) -> None:
    log = tmp_path / "role.log"
    with log.open("w") as out:
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import logging; logging.basicConfig();"
                "logging.getLogger('x').info('starting');"
                "raise ValueError('alpha must be >= 0, got -1')",
            ],
            stderr=out,
            check=False,
        )
    assert last_error_line(log) == "ValueError: alpha must be >= 0, got -1"
    log.write_text("Usage: apex replay\nError: Invalid value for '--alpha'\n")
    assert last_error_line(log) == "Error: Invalid value for '--alpha'"
    log.write_text(
        "2026 INFO x: fine\n2026 ERROR apex.learning.learner: stopping: no shard\n2026 INFO x\n"
    )
    assert last_error_line(log) == "2026 ERROR apex.learning.learner: stopping: no shard"
    assert role_failure("shard 0 did not start", tmp_path / "missing.log").endswith("missing.log")


def test_a_failed_sbatch_leaves_no_run_directory_behind(tmp_path: Path) -> None:
    """slurmctld down: sbatch exits 1 (a stand-in with sbatch's own words on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: "
        "Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
    )
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(
        [sys.executable, "-m", "launch", "slurm", "submit", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "Unable to contact slurm controller" in result.stderr
    assert f"{run_dir}, made for it, was removed" in result.stderr
    assert not run_dir.exists()
    assert "Traceback" not in result.stderr


def test_a_bench_case_whose_extra_is_missing_is_recorded_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ale-py, the shard suite's Pong-frame cases are unavailable rows that say
    what to install, and nothing is started for them."""
    from bench.parts import shard_suite
    from bench.report import missing_env

    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    reason = missing_env("Pong")
    assert reason and "ale_py" in reason and "'.[atari]'" in reason
    result = shard_suite.run(quick=True, kinds=("atari-frames",), parts=("ingest",))
    assert result["records"], result
    assert {r["status"] for r in result["records"]} == {"unavailable"}
    assert all(r["reason"] == reason for r in result["records"])
