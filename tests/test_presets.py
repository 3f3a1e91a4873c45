"""Every environment preset builds, and its network and replay spec fit its observations."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from apex.algorithms.networks import ActorCritic, build_network
from apex.envs.families import env_shape, make_env
from apex.envs.presets import PRESETS
from replay import PrioritizedReplay


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_builds_and_fits_its_network_and_spec(name: str) -> None:
    shape = env_shape(name)
    env = make_env(name, training=True)
    try:
        observation, _ = env.reset(seed=0)
        action = env.action_space.sample()
        next_observation, reward, *_ = env.step(action)
    finally:
        env.close()
    assert observation.shape == shape.observation_shape
    observations = torch.from_numpy(np.stack([observation, next_observation]))
    if shape.continuous:  # Ape-X DPG: the policy's actions lie within the bounds
        network = ActorCritic(
            shape.observation_shape[0], shape.action_low, shape.action_high, (64, 64)
        )
        actions = network(observations).detach().numpy()
        assert actions.shape == (2, shape.actions)
        assert (actions >= shape.action_low).all() and (actions <= shape.action_high).all()
    else:
        network = build_network(
            shape.observation_shape, shape.actions, (64, 64), shape.observation_high
        )
        assert network(observations).shape == (2, shape.actions)
    replay = PrioritizedReplay(shape.transition_spec(), capacity=8, rng=0)
    replay.add(
        {
            "obs": observation[None],
            "action": np.asarray(action)[None].astype(shape.transition_spec()["action"].dtype),
            "reward": np.array([reward], np.float32),
            "discount": np.ones(1, np.float32),
            "next_obs": next_observation[None],
        },
        np.ones(1),
    )
    assert replay.size == 1
    if PRESETS[name].atari:
        assert shape.observation_shape == (4, 84, 84) and shape.observation_dtype == np.uint8
    if PRESETS[name].minatar:  # object planes, channels last, kept whole (not frames)
        assert shape.observation_shape[:2] == (10, 10) and shape.observation_dtype == np.uint8
        assert set(np.unique(observation)) <= {0, 1} and shape.observation_high == 1.0
        assert network.layout.torso == "grid" and network.layout.channels_last
        assert PRESETS[name].defaults["replay"]["frames"] is False


def test_every_preset_file_reads_typed_and_its_settings_resolve() -> None:
    """Each built-in file is data: its envs become typed presets, and what each starts
    from (for any algorithm, and for each algorithm of its action space) resolves."""
    from apex.algorithms.registry import ALGORITHMS
    from apex.envs.presets import FAMILY_IDS, PRESET_DIR, read_preset_file
    from launch.config import resolve

    files = sorted(PRESET_DIR.glob("*.toml"))
    assert files and {p.name for p in PRESETS.values()} == set(PRESETS)
    for path in files:
        for chosen in read_preset_file(path):
            if chosen.name in FAMILY_IDS:  # a family's pattern of more ids, not an env
                assert FAMILY_IDS[chosen.name] == chosen
                continue
            assert PRESETS[chosen.name] == chosen and chosen.source == str(path)
            assert chosen.family in ("gymnasium", "atari", "minatar")
            resolve({"env": chosen.name})
            for algorithm in chosen.algorithm_defaults:
                assert algorithm in {b.name for b in ALGORITHMS}
                resolve({"env": chosen.name, "algorithm": algorithm})


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('family = "doom"\n[envs.X]\n', "family must be one of gymnasium, atari, minatar"),
        ("[envs.X]\nthreshold = 3\n", "envs.X: unknown key 'threshold'"),
        ('[envs.X]\nsolved_return = "high"\n', "envs.X.solved_return must be a number"),
        ("settings = 3\n[envs.X]\n", "settings must be a table"),
        ("[settings]\nactors = 1\n", "no [envs.NAME] table"),
        ("[envs.X\n", "is not valid TOML"),
    ],
)
def test_a_bad_preset_file_is_refused_naming_the_file(tmp_path, text: str, said: str) -> None:
    from apex.envs.presets import read_preset_file
    from replay.errors import ConfigError

    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(said)) as refused:
        read_preset_file(path)
    assert str(path) in str(refused.value)


USER_PRESET = """
env = "Grid"

[preset]
id = "tests.grid_env:Grid-v0"
family = "gymnasium"
solved_return = -0.45

[replay]
capacity = 20_000
min_size = 500

[learner]
batch_size = 32
eval_every_steps = 1_000
eval_episodes = 2
"""


def test_a_run_config_s_own_preset_names_its_env_in_every_process(tmp_path) -> None:
    """``[preset]``: the run's env is a preset of its own, there and in each role's
    process, which reads the resolved config.json."""
    import json
    import subprocess
    import sys

    from apex.envs.presets import preset
    from launch.config import load_file, resolve, write_resolved

    path = tmp_path / "my.toml"
    path.write_text(USER_PRESET)
    config = resolve(load_file(path))
    assert (config.env, config.learner.batch_size) == ("Grid", 32)
    assert preset("Grid").gym_id == "tests.grid_env:Grid-v0"
    assert env_shape("Grid").observation_shape == (10, 10, 4)
    written = write_resolved(config, tmp_path / "run")
    assert json.loads(written.read_text())["preset"]["solved_return"] == -0.45
    role = (
        "from launch.config import read_resolved; from apex.envs.families import "
        "solved_return, env_shape; import sys; config = read_resolved(__import__("
        "'pathlib').Path(sys.argv[1])); print(solved_return(config.env, None), "
        "env_shape(config.env).actions)"
    )
    done = subprocess.run(
        [sys.executable, "-c", role, str(written)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["-0.45", "4"]
    path.write_text(USER_PRESET.replace('family = "gymnasium"', 'family = "doom"'))
    from replay.errors import ConfigError

    with pytest.raises(ConfigError, match=r"the run config \[preset\]: family must be one of"):
        resolve(load_file(path))


@pytest.mark.slow
def test_a_user_preset_file_trains_an_env_that_has_no_built_in_preset(tmp_path) -> None:
    """The README's way: a run config with a ``[preset]`` for a user's env, trained by
    ``apex train my.toml`` until its evaluator has played it, then stopped by SIGINT; the
    evaluator read the preset's threshold (whether a run solves its env is the learning
    tests' business)."""
    import signal
    import subprocess
    import sys

    from apex.learning.metrics import read_metrics
    from tests.test_train import wait_until

    path, run_dir = tmp_path / "my.toml", tmp_path / "run"
    path.write_text(USER_PRESET)
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        str(path),
        "--run-dir",
        str(run_dir),
        "--plain",
        "--no-curves",
        "--actors",
        "1",
        "--max-time",
        "120",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def evaluated() -> bool:
        return any(r["event"] == "evaluation" for r in read_metrics(run_dir))

    try:
        wait_until(process, [], evaluated, 150, "the evaluator to play Grid")
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    records = read_metrics(run_dir)
    assert next(r["updates"] for r in records if r["event"] == "end") > 0
    evaluator_log = (run_dir / "logs" / "evaluator.log").read_text()
    assert "evaluator: Grid every 1000 env steps" in evaluator_log
    assert "at -0.45)" in evaluator_log
    status = subprocess.run(
        [sys.executable, "-m", "launch", "status", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "(target -0.45)" in status.stdout, status.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Breakout", "ALE/Breakout-v5", "ALE/Pong-v5", "SpaceInvaders"])
def test_every_ale_game_is_the_atari_family_by_id_or_bare_name(name: str) -> None:
    """An ALE game with no preset of its own goes through the ALE pipeline with the atari
    family's settings and no threshold; by its id, Pong is Pong's preset."""
    pytest.importorskip("ale_py")
    from apex.envs.presets import preset
    from apex.envs.vector import actor_envs, rom_name

    chosen = preset(name)
    assert chosen.atari and chosen.gym_id.startswith("ALE/") and chosen.defaults
    assert chosen.solved_return == (18.0 if "Pong" in name else None)
    assert env_shape(name).observation_shape == (4, 84, 84)
    envs = actor_envs(name, 2)
    try:
        observations, _ = envs.reset(seed=[0, 1])
        assert observations.shape == (2, 4, 84, 84)
    finally:
        envs.close()
    assert rom_name("ALE/TicTacToe3D-v5") == "tic_tac_toe_3d"


def test_a_name_that_is_no_game_stays_a_plain_gymnasium_id() -> None:
    from apex.envs.presets import preset

    for name in ("NotAGame", "tests.grid_env:Grid-v0", "Foo-v1"):
        chosen = preset(name)
        assert (chosen.family, chosen.gym_id, chosen.defaults) == ("gymnasium", name, {})
