"""What starts a run checks its environment first: a bad name or a missing extra is a
usage error with gymnasium's own message and the project's hint, and no run directory."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from click.testing import CliRunner

from apex.algorithms.registry import check_env
from apex.envs.families import EnvUnavailable, _install_hint
from launch.cli import main


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ("CartPol-v1", "Did you mean: `CartPole`"),
        ("CartPole-v2", "It provides versioned environments"),
    ],
)
def test_a_bad_env_stops_train_before_any_run_directory(tmp_path: Path, env, said) -> None:
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "--env", env, "--run-dir", str(run_dir)])
    assert result.exit_code == 2, result.output  # a usage error, not a dead role (3)
    assert said in result.output and f"cannot make environment '{env}'" in result.output
    assert not run_dir.exists()


def test_slurm_submit_checks_the_env_too(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    arguments = ["slurm", "submit", "--env", "CartPol-v1", "--run-dir", str(run_dir), "--dry-run"]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 2 and "Did you mean" in result.output, result.output
    assert not run_dir.exists()


def test_a_missing_extra_names_the_install_command() -> None:
    missing = gym.error.DependencyNotInstalled("Box2D is not installed, run `pip install swig`")
    assert "pip install -e '.[box2d]'" in _install_hint("LunarLander-v3", missing)
    assert "'.[atari]'" in _install_hint("Pong", ImportError("No module named 'ale_py'"))
    missing_popgym = ImportError("No module named 'popgym'")
    assert "'.[popgym]'" in _install_hint("popgym:popgym-RepeatPreviousEasy-v0", missing_popgym)
    assert _install_hint("CartPol-v1", gym.error.NameNotFound("no such env")) == ""


def test_a_good_env_passes_and_gives_its_shape() -> None:
    assert check_env("CartPole-v1").actions == 2
    assert check_env("Pendulum-v1").continuous  # a Box action space: Ape-X DPG
    with pytest.raises(EnvUnavailable, match="DQN needs Discrete"):
        check_env("Pendulum-v1", "dqn")
