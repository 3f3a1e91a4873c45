"""How an environment is made and what shape it has: the gymnasium envs, the ALE pipeline
(``atari``), MinAtar's planes (``minatar``), and the shapes the networks and the replay
spec are built from. Which family an env name belongs to, and its solve threshold and run
settings, are its preset's (``apex.envs.presets``).

Any gymnasium id with a ``(d,)`` observation and a discrete action space (DQN) or a
bounded flat ``Box`` one (DPG) works without a preset, with no solved threshold unless
one is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from apex.envs.presets import preset
from replay.store.spec import TransitionSpec

# DQN's Atari episode starts: up to this many no-op steps. And ALE's episode limit, as
# gymnasium's ALE/*-v5 ids: 108,000 emulator frames (27,000 steps of 4 frames).
NOOP_MAX = 30
ATARI_MAX_FRAMES = 108_000
# MinAtar has no episode limit of its own (see _make_minatar).
MINATAR_MAX_EPISODE_STEPS = 10_000


def stacks_frames(name: str) -> bool:
    """Whether ``name``'s observations are stacks of frames by construction (the ALE
    pipeline's, ``make_atari``): what frame storage is chosen by when a run leaves
    ``replay.frames`` unset. Any other observation is stored whole unless asked for, and
    then proven (``apex.acting.frame_check``)."""
    return preset(name).atari


def solved_return(name: str, target: float | None) -> float | None:
    """The greedy mean that solves ``name`` in a run: ``target`` (the run's
    ``learner.target_return``) if given, else the preset's threshold (None: none)."""
    return target if target is not None else preset(name).solved_return


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
    return make_atari(chosen.gym_id, training=training)


def make_atari(
    gym_id: str, *, training: bool, noop_max: int = NOOP_MAX, max_frames: int = ATARI_MAX_FRAMES
) -> gym.Env:
    """One ALE game through gymnasium's wrappers, preprocessed as DQN's (actors step
    ale-py's vector env instead, ``apex.envs.vector``, which does the same in C++)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(gym_id, frameskip=1, repeat_action_probability=0.0,
                   max_num_frames_per_episode=max_frames)  # fmt: skip
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, noop_max=noop_max)
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


def probe_env(name: str) -> EnvShape:
    """The shape of ``name``, from one env made here: a misspelled id or a missing extra
    is found before any process starts.

    Raises:
        EnvUnavailable: gymnasium's own message (with its "did you mean"), plus the
            project's install hint where an extra is missing.
    """
    try:
        return env_shape(name)
    except (gym.error.Error, ImportError, ValueError) as exc:
        raise EnvUnavailable(
            f"cannot make environment {name!r}: {exc}{_install_hint(name, exc)}"
        ) from exc


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
