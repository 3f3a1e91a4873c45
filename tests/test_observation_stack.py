"""``[env] stack = k``: the newest k observations side by side, on the channel axis the
networks read, through the config, every role's env and the evaluation copies."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from apex.envs.families import env_shape, make_env
from apex.envs.observation_stack import ObservationStack
from apex.envs.vector import evaluation_envs
from launch.config import ConfigError, resolve


class Counting(gym.Env):
    """Observation ``t`` everywhere at step ``t`` (``shape`` of uint8), 5 steps long."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _observe(self) -> np.ndarray:
        return np.full(self.observation_space.shape, self._t, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action):
        self._t += 1
        return self._observe(), 1.0, self._t == 5, False, {}


@pytest.mark.parametrize(
    ("shape", "stacked", "axis"),
    [
        ((4,), (12,), 0),
        ((10, 10, 4), (10, 10, 12), 2),
        ((3, 16, 16), (9, 16, 16), 0),
        ((12, 12), (12, 12, 3), 2),
    ],
)
def test_the_newest_observations_go_side_by_side_oldest_first(shape, stacked, axis) -> None:
    env = ObservationStack(Counting(shape), 3)
    assert env.observation_space.shape == stacked and env.observation_space.dtype == np.uint8
    first, _ = env.reset(seed=0)
    assert first.shape == stacked and (first == 0).all()  # the start repeats the first
    for _ in range(3):
        observation, *_ = env.step(0)
    # Steps 1, 2, 3 in the three slots along the axis, oldest first.
    slots = (
        np.split(observation, 3, axis=axis) if len(shape) != 2 else np.moveaxis(observation, 2, 0)
    )
    assert [int(np.unique(slot).item()) for slot in slots] == [1, 2, 3]
    assert env.observation_space.contains(observation)
    again, _ = env.reset()
    assert (again == 0).all()


def test_only_a_box_of_one_to_three_dimensions_stacks() -> None:
    with pytest.raises(ValueError, match=r"\[env\] stack takes a Box observation"):
        ObservationStack(gym.make("FrozenLake-v1"), 2)
    with pytest.raises(ValueError, match="stack must be a whole number"):
        ObservationStack(Counting((4,)), 0)


def test_a_run_config_s_stack_reaches_the_env_its_shape_and_the_evaluation_copies() -> None:
    config = resolve({"env": {"id": "CartPole-v1", "stack": 4}})
    assert config.env_stack == 4 and env_shape("CartPole-v1").observation_shape == (16,)
    env = make_env("CartPole-v1", training=True)
    observation, _ = env.reset(seed=3)
    np.testing.assert_array_equal(observation[:4], observation[12:])  # the start, 4 times
    env.close()
    copies = evaluation_envs("CartPole-v1", 2)
    try:
        observations, _ = copies.reset(seed=0)
        assert observations.shape == (2, 16)
    finally:
        copies.close()
    # config.json keeps it, and reads back the same.
    again = resolve(config.to_dict(), sized=False)
    assert again.env_stack == 4 and again.to_dict()["env"]["stack"] == 4
    # The next run of the process has no stack of its own: none is left from this one.
    assert resolve({"env": "CartPole-v1"}).env_stack == 1
    assert env_shape("CartPole-v1").observation_shape == (4,)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"id": "CartPole-v1", "stack": 0}, "stack must be a whole number"),
        ({"id": "CartPole-v1", "stack": 2.5}, "stack must be a whole number"),
        ({"id": "Pong", "stack": 2}, "stacks its frames itself"),
    ],
)
def test_a_bad_stack_is_refused_with_the_reason(env, message) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve({"env": env})


def test_the_views_read_a_run_whose_env_is_a_table(tmp_path) -> None:
    """config.json holds ``[env]`` as a table where a run gave its env arguments, a factory
    or a stack; the views name the env and find its target from it."""
    import json

    from launch.views.status import run_status
    from launch.views.watch import RunWatch

    config = resolve({"env": {"id": "CartPole-v1", "stack": 2}}).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert isinstance(config["env"], dict)
    assert RunWatch(tmp_path).target == 475.0
    assert run_status(tmp_path)["env"] == "CartPole-v1"


def test_a_minatar_game_can_hide_planes_and_shows_the_others_unchanged() -> None:
    """``[env] kwargs.hidden_planes``: Breakout without its trail is partially observed
    (the ball, not where it goes); the planes it keeps are the full game's, step for step."""
    pytest.importorskip("minatar")

    def breakout(**kwargs) -> gym.Env:
        resolve({"env": {"id": "MinAtar/Breakout-v1", "kwargs": kwargs}})
        return make_env("MinAtar/Breakout-v1", training=True)

    full, partial = breakout(), breakout(hidden_planes=["trail"])
    assert partial.observation_space.shape == (10, 10, 3)
    seen, shown = full.reset(seed=4)[0], partial.reset(seed=4)[0]
    for action in [0, 1, 2, 1, 1, 0, 2, 2]:
        # planes paddle, ball, trail, brick: the trail (2) is the one left out
        np.testing.assert_array_equal(shown, seen[..., [0, 1, 3]])
        seen, shown = full.step(action)[0], partial.step(action)[0]
    with pytest.raises(ValueError, match=r"has the planes \['paddle', 'ball', 'trail', 'brick'\]"):
        breakout(hidden_planes=["ghost"])
    with pytest.raises(ValueError, match="must keep one"):
        breakout(hidden_planes=["paddle", "ball", "trail", "brick"])
    resolve({"env": "MinAtar/Breakout-v1"})  # the next test's Breakout shows every plane
