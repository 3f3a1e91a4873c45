"""Environment presets: what ``--env`` names, how to build it, and when it is solved.

* ``CartPole-v1``: solved at a greedy mean return of 475 (gymnasium's threshold).
* ``LunarLander-v3``: solved at 200; needs Box2D (``pip install 'apex-rl[box2d]'``).
* ``Pong``: ALE Pong with the standard DQN preprocessing (gymnasium's AtariPreprocessing:
  frame skip 4, 84×84 grayscale, up to 30 no-op starts), a stack of 4 frames, and rewards
  clipped to their sign while training. Needs ``pip install 'apex-rl[atari]'`` (ale-py
  ships the ROMs; AtariPreprocessing needs OpenCV). Solved at 18.

Any other gymnasium id with a discrete action space and a ``(d,)`` observation also works,
with no solved threshold unless one is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from replay.spec import TransitionSpec


@dataclass(frozen=True)
class EnvPreset:
    """A named environment.

    Attributes:
        name: what ``--env`` accepts.
        solved_return: greedy mean return over evaluation episodes that counts as solved.
        atari: built through the Atari pipeline.
        gym_id: the gymnasium id to make.
    """

    name: str
    solved_return: float | None
    atari: bool = False
    gym_id: str = ""


PRESETS = {
    "CartPole-v1": EnvPreset("CartPole-v1", 475.0, gym_id="CartPole-v1"),
    "LunarLander-v3": EnvPreset("LunarLander-v3", 200.0, gym_id="LunarLander-v3"),
    "Pong": EnvPreset("Pong", 18.0, atari=True, gym_id="ALE/Pong-v5"),
}


def preset(name: str) -> EnvPreset:
    """The preset for ``name``; an unknown name is taken as a plain gymnasium id."""
    return PRESETS.get(name, EnvPreset(name, None, gym_id=name))


def make_env(name: str, *, training: bool) -> gym.Env:
    """Builds one environment. ``training`` clips Atari rewards; evaluation does not.

    Raises:
        gymnasium.error.Error: an unknown id or a missing optional dependency.
    """
    chosen = preset(name)
    if not chosen.atari:
        return gym.make(chosen.gym_id)
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(chosen.gym_id, frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, noop_max=30)
    env = gym.wrappers.FrameStackObservation(env, 4)
    if training:
        env = gym.wrappers.TransformReward(env, np.sign)
    return env


def env_factories(name: str, count: int, *, training: bool) -> list[Callable[[], gym.Env]]:
    return [lambda: make_env(name, training=training) for _ in range(count)]


@dataclass(frozen=True)
class EnvShape:
    """What the networks and the replay spec need to know about an environment."""

    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    actions: int

    def transition_spec(self) -> TransitionSpec:
        return TransitionSpec.from_dict(
            {
                "obs": (self.observation_shape, self.observation_dtype),
                "action": ((), "int64"),
                "reward": ((), "float32"),
                "discount": ((), "float32"),
                "next_obs": (self.observation_shape, self.observation_dtype),
            }
        )


def env_shape(name: str) -> EnvShape:
    """Observation shape and dtype and the number of actions of ``name``.

    Raises:
        ValueError: an action space that is not discrete.
    """
    env = make_env(name, training=True)
    try:
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"{name} has a {type(env.action_space).__name__} action space; DQN needs Discrete"
            )
        space = env.observation_space
        return EnvShape(tuple(space.shape), np.dtype(space.dtype), int(env.action_space.n))
    finally:
        env.close()
