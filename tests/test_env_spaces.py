"""Observations of any kind gymnasium has: Discrete one-hot, Tuple, Dict and MultiBinary
flattened to one float32 vector, anything else refused before a process starts; env
arguments from a run config's ``[env]`` table; gymnasium's threshold where no preset has
one; and ``apex envs``, the list of what ``--env`` takes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from apex.envs.families import EnvUnavailable, env_shape, make_env, probe_env, solved_return
from launch.cli import main
from launch.config import resolve


def test_discrete_observations_are_one_hot_and_kwargs_reach_the_env() -> None:
    config = resolve({"env": {"id": "FrozenLake-v1", "kwargs": {"is_slippery": False}}})
    assert (config.env, config.env_kwargs) == ("FrozenLake-v1", {"is_slippery": False})
    assert config.to_dict()["env"] == {"id": "FrozenLake-v1", "kwargs": {"is_slippery": False}}
    assert resolve(config.to_dict()).env_kwargs == {"is_slippery": False}  # config.json's
    env = make_env("FrozenLake-v1", training=True)
    observation, _ = env.reset(seed=0)
    assert observation.dtype == np.float32 and observation.shape == (16,)
    assert observation.tolist() == [1.0] + [0.0] * 15  # the start cell, one-hot
    # Not slippery: right, right, down, down, down, right reaches the goal, every time.
    for action in (2, 2, 1, 1, 1):
        env.step(action)
    assert env.step(2)[1] == 1.0
    assert env_shape("FrozenLake-v1").observation_shape == (16,)
    # A run of the same env without arguments is made as gymnasium's default again.
    resolve({"env": "FrozenLake-v1"})
    assert "is_slippery" not in make_env("FrozenLake-v1", training=True).unwrapped.spec.kwargs


def test_tuple_and_dict_observations_are_flattened() -> None:
    assert env_shape("Blackjack-v1").observation_shape == (32 + 11 + 2,)
    env = make_env("tests.space_envs:DictLight-v0", training=True)
    observation, _ = env.reset(seed=1)
    assert observation.dtype == np.float32 and observation.shape == (2 + 3 + 4,)
    assert observation[2:5].sum() == 1.0 and observation[5:].sum() == 1.0
    assert np.argmax(observation[2:5]) == np.argmax(observation[5:])  # the same light


def test_an_observation_no_network_takes_is_refused_with_one_line() -> None:
    with pytest.raises(EnvUnavailable, match=r"has observations of Text\(.*use a Box, "):
        probe_env("tests.space_envs:Words-v0")
    result = CliRunner().invoke(main, ["train", "--env", "tests.space_envs:Words-v0"])
    assert result.exit_code == 2 and "has observations of Text" in result.output
    assert "Traceback" not in result.output


def test_env_tables_from_the_command_line_and_their_mistakes() -> None:
    from launch.overrides import run_overrides
    from replay.errors import ConfigError

    overrides = run_overrides(env="FrozenLake-v1", settings=("env.kwargs.map_name=8x8",))
    assert resolve({}, overrides).env_kwargs == {"map_name": "8x8"}
    assert resolve({"env": "FrozenLake-v1"}, {"env": {"kwargs": {"map_name": "8x8"}}}).env == (
        "FrozenLake-v1"
    )
    with pytest.raises(ConfigError) as refused:
        resolve({"env": {"kwargs": 4, "name": "x"}})
    assert refused.value.problems == [
        "[env]: unknown key 'name' (known: id, kwargs, make, stack)",
        "[env] needs an id (a gymnasium id or preset name) or a make, got None",
        "[env] kwargs must be a table of the env's arguments, got 4",
    ]
    with pytest.raises(ConfigError, match="Pong is an ALE game, made by ale-py's vector env"):
        resolve({"env": {"id": "Pong", "kwargs": {"mode": 1}}})


def test_an_env_without_a_preset_is_solved_at_gymnasium_s_threshold() -> None:
    assert solved_return("MountainCarContinuous-v0", None) == 90.0
    assert solved_return("FrozenLake-v1", None) == 0.7
    assert solved_return("MountainCarContinuous-v0", 50.0) == 50.0  # the run's own
    assert solved_return("CartPole-v1", None) == 475.0  # the preset's
    assert solved_return("tests.space_envs:DictLight-v0", None) is None  # none in its spec
    assert solved_return("MinAtar/Breakout-v1", None) is None


def test_apex_envs_lists_every_family_its_names_and_their_extras() -> None:
    result = CliRunner().invoke(main, ["envs"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split(":")[0] for line in lines if not line.startswith(" ")][:3] == [
        "gymnasium",
        "atari",
        "minatar",
    ]
    assert any(
        line.split()[:2] == ["LunarLander-v3", "id"] and "extra box2d" in line for line in lines
    )
    rows = json.loads(CliRunner().invoke(main, ["envs", "--json"]).output)
    by_name = {row["name"]: row for row in rows}
    assert by_name["ALE/*-v5"]["pattern"] and by_name["ALE/*-v5"]["extra"] == "atari"
    assert by_name["CartPole-v1"]["solved_return"] == 475.0
    assert {row["name"] for row in rows if row["family"] == "minatar"} == {
        f"MinAtar/{game}-v1"
        for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
    }


def test_an_image_of_any_size_acts_with_a_network_of_the_user_s_own() -> None:
    """A 12x12 grayscale image stays an image; the built-in convolutions take it
    (tests/test_image_networks.py), and so does a user's convolutional network, in the
    learner and the actors alike; a 3x3 one only a user's."""
    from apex.algorithms.registry import build_acting, network_problems
    from launch.config import resolve

    shape = env_shape("tests.space_envs:Pixels-v0")
    assert shape.observation_shape == (12, 12) and shape.observation_dtype == np.uint8
    plain = resolve({"env": "tests.space_envs:Pixels-v0"})
    assert network_problems(plain.learner, shape) == []
    specks = resolve({"env": "tests.space_envs:Specks-v0"})
    [problem] = network_problems(specks.learner, env_shape("tests.space_envs:Specks-v0"))
    assert "has observations of shape (3, 3): the built-in networks take" in problem
    own = resolve(
        {
            "env": "tests.space_envs:Pixels-v0",
            "learner": {"network": "tests.user_networks:grayscale_q"},
        }
    )
    assert network_problems(own.learner, shape) == []
    acting = build_acting(own.actor_config(0), own.algorithms, shape).policy
    observations = make_env("tests.space_envs:Pixels-v0", training=True).reset(seed=0)[0]
    assert acting.values(observations[None]).shape == (1, 3)
