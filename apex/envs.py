"""Environment presets: what ``--env`` names, how to build it, and when it is solved.

* ``CartPole-v1``: solved at a greedy mean return of 475 (gymnasium's threshold).
* ``LunarLander-v3``: solved at 200; needs Box2D (``pip install 'apex-rl[box2d]'``).
* ``Pong``: ALE Pong with the standard DQN preprocessing (gymnasium's AtariPreprocessing:
  frame skip 4, 84×84 grayscale, up to 30 no-op starts), a stack of 4 frames, and rewards
  clipped to their sign while training. Needs ``pip install 'apex-rl[atari]'`` (ale-py
  ships the ROMs; AtariPreprocessing needs OpenCV). Solved at 18.
* ``MinAtar/Breakout-v1`` and ``MinAtar/SpaceInvaders-v1``: MinAtar's 10×10 planes of
  objects (``pip install 'apex-rl[minatar]'``), pixels that learn on a CPU; no threshold.

* ``Pendulum-v1``: continuous control (Ape-X DPG), solved at −200.
* ``LunarLanderContinuous-v3``: continuous, solved at 200; needs Box2D.
* ``HalfCheetah-v5`` (4800) and ``Hopper-v5`` (3800): MuJoCo, gymnasium's thresholds;
  need ``pip install 'apex-rl[mujoco]'``.

Any other gymnasium id with a ``(d,)`` observation and a discrete action space (DQN) or a
bounded flat ``Box`` one (DPG) also works, with no solved threshold unless one is given.

Each preset also carries the run settings measured to learn it quickly on a 2-core machine
(:attr:`EnvPreset.defaults`, in the layout of a run config file); anything a user sets wins
over them (``launch.config.resolve``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from replay.store.spec import TransitionSpec


@dataclass(frozen=True)
class EnvPreset:
    """A named environment.

    Attributes:
        name: what ``--env`` accepts.
        solved_return: greedy mean return over evaluation episodes that counts as solved.
        atari: built through the Atari pipeline.
        minatar: a MinAtar game (the ``minatar`` extra): 10x10 planes of objects, one
            channel per kind, as uint8 0/1 (``(10, 10, C)``, channels last).
        gym_id: the gymnasium id to make.
        defaults: run settings for this environment (sections as in a config file).
    """

    name: str
    solved_return: float | None
    atari: bool = False
    minatar: bool = False
    gym_id: str = ""
    defaults: Mapping[str, object] = field(default_factory=dict)


# What every continuous-control preset's learner starts from (the optimizer TD3's paper
# used for DDPG and TD3 alike).
_DPG_LEARNER = {"batch_size": 256, "learning_rate": 1e-3, "adam_epsilon": 1e-8,
                "max_grad_norm": 10.0}  # fmt: skip

_MUJOCO: dict = {
    "actors": 2,
    "replay": {
        "capacity": 1_000_000,
        "min_size": 10_000,
        "samples_per_insert": 64.0,
        "error_buffer": 50_000.0,
    },
    "actor": {
        "envs_per_actor": 4,
        "weight_refresh_steps": 50,
        "hidden": [256, 256],
        "noise_scale": 0.3,
    },
    "learner": {
        **_DPG_LEARNER,
        "eval_every_steps": 10_000,
        "eval_episodes": 10,
        "hidden": [256, 256],
    },
}

# The MinAtar paper's DQN (Young & Tian 2019): 100K replay, 5K steps before learning,
# γ 0.99, a target copy every 1,000 updates, learning rate 2.5e-4; here Ape-X's n-step,
# prioritized replay and ε per env copy, with two actor processes of 8 envs.
MINATAR_MAX_EPISODE_STEPS = 10_000
_MINATAR: dict = {
    "actors": 2,
    "replay": {
        "capacity": 100_000,
        "min_size": 5_000,
        "samples_per_insert": 8.0,
        "error_buffer": 20_000.0,
        # (10, 10, C) planes are one observation, not a stack of frames.
        "frames": False,
    },
    "actor": {"envs_per_actor": 8, "n_step": 3, "weight_refresh_steps": 50},
    "learner": {
        "batch_size": 128,
        "learning_rate": 2.5e-4,
        "dqn": {"target_update_period": 1000},
        "eval_every_steps": 50_000,
        "eval_episodes": 10,
    },
}

_DEFAULTS: dict[str, dict] = {
    "CartPole-v1": {
        # One actor of 8 envs, not two of 4: on 2 cores the learner is the limit, and a
        # second actor process takes CPU from it (210-230 against 240-330 updates/s).
        # Over 8 seeds each (`apex train --seed S`, wall clock): two actors of 4 envs,
        # n 3, base ε 0.1: median 29.3 s; n 5 and ε 0.2: 22.8 s; one actor of 8 envs,
        # n 5, ε 0.2: 14.8 s (8.7-19.4), against 17.1 s at ε 0.1 and 17.6 s at n 3.
        "actors": 1,
        "shards": 1,
        "replay": {
            "capacity": 100_000,
            "min_size": 2_000,
            # Two samples per insert and a 256-wide net solved in a median 22 s over 6
            # seeds, against 27 s at four samples and 37 s with a 128-wide net (ε 0.4).
            "samples_per_insert": 2.0,
            "error_buffer": 20_000.0,
        },
        # Ape-X's own ε = 0.4, α = 7 over the run's env copies. 0.2 was chosen when one
        # process's copies all explored at the base ε; once each copy became an Ape-X actor
        # (e35e8a6: 8 copies span 0.2 to 2.6e-6) it made CartPole need about 1.4x the
        # updates to solve. Tuned on seeds 100-102 only (updates to solve, median):
        # 0.2/α 7: 3,826; 0.4/α 7: 2,695; 0.4/α 3: 2,662; 0.2/α 1: 2,726 (issue 29).
        "actor": {
            "envs_per_actor": 8,
            "n_step": 5,
            "weight_refresh_steps": 25,
            "hidden": [256, 256],
            "epsilon": 0.4,
        },
        "learner": {
            "batch_size": 64,
            "learning_rate": 2.3e-3,
            "adam_epsilon": 1e-8,
            "max_grad_norm": 10.0,
            "dqn": {"target_update_period": 128},
            "publish_period": 20,
            "eval_every_steps": 2_000,
            "hidden": [256, 256],
        },
    },
    "LunarLander-v3": {
        "replay": {
            "capacity": 500_000,
            "min_size": 10_000,
            "samples_per_insert": 8.0,
            "error_buffer": 50_000.0,
        },
        "actor": {"envs_per_actor": 8, "weight_refresh_steps": 50},
        "learner": {
            "batch_size": 256,
            "learning_rate": 5e-4,
            "dqn": {"target_update_period": 1000},
            "eval_every_steps": 10_000,
            "eval_episodes": 10,
        },
    },
    # Ape-X DPG (plain DDPG by default, apex.dpg) on vector observations.
    "Pendulum-v1": {
        "actors": 1,
        "shards": 1,
        "replay": {
            "capacity": 200_000,
            "min_size": 1_000,
            "samples_per_insert": 64.0,
            "error_buffer": 20_000.0,
        },
        "actor": {
            "envs_per_actor": 4,
            "n_step": 3,
            "gamma": 0.98,
            "weight_refresh_steps": 10,
            "hidden": [256, 256],
            "noise_scale": 0.3,
        },
        "learner": {
            **_DPG_LEARNER,
            "publish_period": 10,
            "eval_every_steps": 2_000,
            "eval_episodes": 10,
            "hidden": [256, 256],
        },
    },
    "LunarLanderContinuous-v3": {
        "replay": {
            "capacity": 500_000,
            "min_size": 10_000,
            "samples_per_insert": 16.0,
            "error_buffer": 50_000.0,
        },
        "actor": {
            "envs_per_actor": 8,
            "weight_refresh_steps": 50,
            "hidden": [400, 300],
            "noise_scale": 0.3,
        },
        "learner": {
            **_DPG_LEARNER,
            "eval_every_steps": 10_000,
            "eval_episodes": 10,
            "hidden": [400, 300],
        },
    },
    # MuJoCo (the mujoco extra): 1,000-step episodes, 6 and 3 action dimensions.
    "HalfCheetah-v5": _MUJOCO,
    "Hopper-v5": _MUJOCO,
    "Pong": {
        "actors": 2,
        # Ape-X's 2M transitions. Each frame is kept once and LZ4-compressed (about 250
        # bytes a Pong frame), so 2M take about 1.5 GB instead of the 113 GB of whole
        # stacked transitions (bench/RESULTS.md, "Atari-scale replay").
        "replay": {"capacity": 2_000_000, "min_size": 20_000},
        "actor": {"envs_per_actor": 4, "weight_refresh_steps": 100},
        "learner": {
            "batch_size": 512,
            "learning_rate": 1e-4,
            "dqn": {"target_update_period": 2500},
            # A greedy Pong game lasts minutes: a few evaluations an hour.
            "eval_every_steps": 250_000,
            "eval_episodes": 5,
        },
    },
}

PRESETS = {
    "CartPole-v1": EnvPreset(
        "CartPole-v1", 475.0, gym_id="CartPole-v1", defaults=_DEFAULTS["CartPole-v1"]
    ),
    "LunarLander-v3": EnvPreset(
        "LunarLander-v3", 200.0, gym_id="LunarLander-v3", defaults=_DEFAULTS["LunarLander-v3"]
    ),
    "Pendulum-v1": EnvPreset(
        "Pendulum-v1", -200.0, gym_id="Pendulum-v1", defaults=_DEFAULTS["Pendulum-v1"]
    ),
    "LunarLanderContinuous-v3": EnvPreset(
        "LunarLanderContinuous-v3",
        200.0,
        gym_id="LunarLanderContinuous-v3",
        defaults=_DEFAULTS["LunarLanderContinuous-v3"],
    ),
    # gymnasium's own reward thresholds for these two.
    "HalfCheetah-v5": EnvPreset(
        "HalfCheetah-v5", 4800.0, gym_id="HalfCheetah-v5", defaults=_DEFAULTS["HalfCheetah-v5"]
    ),
    "Hopper-v5": EnvPreset(
        "Hopper-v5", 3800.0, gym_id="Hopper-v5", defaults=_DEFAULTS["Hopper-v5"]
    ),
    "Pong": EnvPreset("Pong", 18.0, atari=True, gym_id="ALE/Pong-v5", defaults=_DEFAULTS["Pong"]),
    **{
        name: EnvPreset(name, None, minatar=True, gym_id=name, defaults=_MINATAR)
        for name in ("MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1")
    },
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
    if chosen.minatar:
        return _make_minatar(chosen.gym_id)
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


def _make_minatar(gym_id: str) -> gym.Env:
    """A MinAtar game (the minimal action set, ``-v1``) with its boolean planes as uint8,
    which the replay stores and sends as it does Atari frames, and an episode limit:
    MinAtar has none, and a good SpaceInvaders agent could otherwise play on for ever."""
    from minatar import gym as minatar_gym  # the minatar extra

    if gym_id not in gym.registry:
        minatar_gym.register_envs()
    env = gym.make(gym_id, max_episode_steps=MINATAR_MAX_EPISODE_STEPS)
    space = gym.spaces.Box(0, 1, env.observation_space.shape, np.uint8)
    return gym.wrappers.TransformObservation(env, lambda planes: planes.astype(np.uint8), space)


def env_factories(name: str, count: int, *, training: bool) -> list[Callable[[], gym.Env]]:
    return [lambda: make_env(name, training=training) for _ in range(count)]


@dataclass(frozen=True)
class EnvShape:
    """What the networks and the replay spec need to know about an environment.

    ``actions`` is the number of discrete actions, or a continuous action's size (``Box``
    spaces, whose bounds are ``action_low`` and ``action_high``)."""

    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    actions: int
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    @property
    def continuous(self) -> bool:
        return bool(self.action_low)

    def transition_spec(self) -> TransitionSpec:
        action = ((self.actions,), "float32") if self.continuous else ((), "int64")
        return TransitionSpec.from_dict(
            {
                "obs": (self.observation_shape, self.observation_dtype),
                "action": action,
                "reward": ((), "float32"),
                "discount": ((), "float32"),
                "next_obs": (self.observation_shape, self.observation_dtype),
            }
        )


class EnvUnavailable(ValueError):
    """An environment that cannot be made here: the message says why and what to install."""


def check_env(name: str, algorithm: str = "auto") -> EnvShape:
    """The shape of ``name``, from one env made here: a misspelled id, a missing extra or
    an action space the algorithm cannot use is found before any process starts.

    Raises:
        EnvUnavailable: gymnasium's own message (with its "did you mean"), plus the
            project's install hint where an extra is missing.
    """
    try:
        shape = env_shape(name)
    except (gym.error.Error, ImportError, ValueError) as exc:
        raise EnvUnavailable(
            f"cannot make environment {name!r}: {exc}{_install_hint(name, exc)}"
        ) from exc
    from apex.algorithm import choose

    try:
        choose(algorithm, shape, name)
    except ValueError as exc:
        raise EnvUnavailable(str(exc)) from exc
    return shape


def _install_hint(name: str, exc: Exception) -> str:
    text = f"{type(exc).__name__} {exc}".lower()
    if preset(name).atari or "ale_py" in text or "ale-py" in text:
        extra = "atari"
    elif "box2d" in text:
        extra = "box2d"
    elif "mujoco" in text:
        extra = "mujoco"
    elif preset(name).minatar or "minatar" in text:
        extra = "minatar"
    else:
        return ""
    return (
        f"\n  it needs the project's {extra!r} extra: APEX_EXTRAS=dev,{extra} bash "
        f"scripts/setup.sh (or pip install -e '.[{extra}]' in the project's environment)"
    )


def env_shape(name: str) -> EnvShape:
    """Observation shape and dtype, and the actions, of ``name``.

    Raises:
        ValueError: an action space that is neither ``Discrete`` nor a flat ``Box``.
    """
    env = make_env(name, training=True)
    try:
        space, actions = env.observation_space, env.action_space
        observation = (tuple(space.shape), np.dtype(space.dtype))
        if isinstance(actions, gym.spaces.Discrete):
            return EnvShape(*observation, int(actions.n))
        if isinstance(actions, gym.spaces.Box) and len(actions.shape) == 1:
            low, high = actions.low.astype(float), actions.high.astype(float)
            if not (np.isfinite(low).all() and np.isfinite(high).all()):
                raise ValueError(f"{name}'s Box action space is unbounded: DPG needs bounds")
            return EnvShape(*observation, actions.shape[0], tuple(low), tuple(high))
        raise ValueError(f"{name} has a {type(actions).__name__} action space of shape "
                         f"{actions.shape}: use Discrete (DQN) or a flat Box (DPG)")  # fmt: skip
    finally:
        env.close()
