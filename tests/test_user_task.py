"""A user's own task end to end: the example package's env factory (``[env] make``)
trained through ``apex train`` and through the Python API (``launch.api.train``), its
evaluations included; and what the API refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apex.learning.metrics import read_metrics
from examples.grid_world import best_return, make
from launch.api import RunRefused, train

EXAMPLE = Path(__file__).parents[1] / "examples" / "grid_world.toml"


def test_the_example_env_pays_its_shortest_walk() -> None:
    env = make(size=4)
    env.reset(seed=0)
    rewards = [env.step(action)[1] for action in (1, 1, 1, 2, 2, 2)]
    assert sum(rewards) == pytest.approx(best_return(4))


def test_the_api_refuses_what_apex_train_refuses_and_starts_nothing(tmp_path: Path) -> None:
    with pytest.raises(RunRefused, match=r"replay.alpha must be a finite number >= 0, got -1"):
        train({"replay": {"alpha": -1}}, run_dir=tmp_path / "run")
    with pytest.raises(RunRefused, match=r"cannot import nowhere"):
        train({"env": {"make": "nowhere:make"}}, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_user_network_is_the_learner_s_and_the_actors_and_takes_its_weights() -> None:
    import numpy as np
    import torch

    from apex.algorithms.registry import build_acting, build_algorithm, check_env
    from launch.config import load_file, resolve

    config = resolve(load_file(EXAMPLE))
    assert config.actor.network == config.learner.network == "examples.grid_network:q_network"
    shape = check_env(config.env, config.algorithm)
    algorithm = build_algorithm(config.learner, config.algorithms, shape, torch.device("cpu"))
    acting = build_acting(config.actor_config(0), config.algorithms, shape).policy
    assert isinstance(algorithm.policy, torch.nn.Sequential)  # the factory's module
    acting.network.load(
        {name: tensor.numpy() for name, tensor in algorithm.policy.state_dict().items()}
    )
    observations = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    expected = algorithm.policy(torch.from_numpy(observations)).detach().numpy()
    assert np.allclose(acting.values(observations), expected, atol=1e-6)


@pytest.mark.slow
def test_the_example_env_trains_to_a_confirmed_solve_by_cli_and_by_api(tmp_path: Path) -> None:
    """Through the API, the example trains to its confirmed solve (about 10 s of training
    alone; 90 s at most); through the CLI started outside the repository, the same config
    starts, evaluates and ends (a target every return reaches ends it at its first
    evaluation): its modules come from the folder above the config's package."""
    limit = {"learner": {"max_time_s": 90}}
    summary = train(EXAMPLE, overrides=limit, run_dir=tmp_path / "api", echo=lambda _: None)
    assert summary["solved"] and summary["exit_code"] == 0, summary
    assert summary["run_dir"] == str(tmp_path / "api")
    config = json.loads((tmp_path / "api" / "config.json").read_text())
    assert config["env"] == {
        "id": "GridWorld",
        "kwargs": {"size": 5},
        "make": "examples.grid_world:make",
    }
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        str(EXAMPLE),
        "--max-time",
        "90",
        "--target-return",
        "-10",
        "--set",
        "learner.confirm_episodes=0",
        "--plain",
        "--no-curves",
        "--run-dir",
        str(tmp_path / "cli"),
    ]
    done = _run_outside_the_repository(command, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-2].startswith("solved in "), done.stdout[-1000:]
    records = read_metrics(tmp_path / "cli")
    evaluations = [r for r in records if r.get("event") == "evaluation"]
    assert evaluations and evaluations[0]["episodes"] == 10  # the example's eval_episodes


CORRIDOR = """
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.place = 0
        return np.eye(4, dtype=np.float32)[0], {}

    def step(self, action):
        self.place = min(3, max(0, self.place + (1 if action == 1 else -1)))
        done = self.place == 3
        return np.eye(4, dtype=np.float32)[self.place], float(done) - 0.1, done, False, {}


def make():
    return gym.wrappers.TimeLimit(Corridor(), 20)
"""

SCRIPT = """
import json, sys
from launch.api import train

summary = train({"env": {"make": "corridor:make", "id": "Corridor"}}, run_dir=sys.argv[1],
                overrides={"learner": {"target_return": -10.0, "confirm_episodes": 0,
                                       "max_time_s": 90}}, echo=lambda _: None)
print(json.dumps({"solved": summary["solved"], "exit_code": summary["exit_code"]}))
"""


@pytest.mark.slow
def test_a_script_anywhere_trains_on_the_module_beside_it(tmp_path: Path) -> None:
    """A user's script and env module in a folder of their own, run from another: the
    roles, started in that other folder, import the module from where the script did."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "corridor.py").write_text(CORRIDOR)
    (project / "train_it.py").write_text(SCRIPT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = [sys.executable, str(project / "train_it.py"), str(tmp_path / "run")]
    done = _run_outside_the_repository(command, elsewhere)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"solved": True, "exit_code": 0}


def _run_outside_the_repository(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``command`` in ``cwd`` with no PYTHONPATH: only what it finds by itself imports."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=240, check=False, cwd=cwd, env=environment
    )
