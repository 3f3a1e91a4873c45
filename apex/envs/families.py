"""How an environment is made and what shape it has: the gymnasium envs, the ALE pipeline
(``atari``), MinAtar's planes (``minatar``), and the shapes the networks and the replay
spec are built from. Which family an env name belongs to, and its solve threshold and run
settings, are its preset's (``apex.envs.presets``).

Any gymnasium id works without a preset, its solve threshold gymnasium's
``reward_threshold`` where its spec has one, if its actions are ``Discrete`` (DQN,
IMPALA) or a bounded flat ``Box`` (DPG) and its observations are one of:

- a flat ``Box`` ``(d,)``;
- ``Discrete`` (one-hot), ``MultiBinary``, ``MultiDiscrete`` (one-hot each), a ``Box`` of
  more dimensions that is no image, or a ``Tuple`` or ``Dict`` of any of these: flattened
  to one float32 vector (gymnasium's ``spaces.flatten``);
- uint8 images of two or three dimensions, as they are: the built-in networks take any
  from 4x4 up, with convolutions sized to them (``apex.algorithms.network_choice``), a
  user's ``learner.network`` any.

Anything else (``Text``, ``Graph``, ``Sequence``) is refused when the run's env is probed,
before any process starts, as is an image no network of the run takes.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from apex.envs.guard import GuardedCopy
from apex.envs.observation_stack import ObservationStack
from apex.envs.presets import EnvPreset, extra_installed, preset, register
from apex.envs.user_code import load_entry_point
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
    ``learner.target_return``) if given, else the preset's threshold, else gymnasium's
    ``reward_threshold`` for its id (None: none)."""
    if target is not None:
        return target
    chosen = preset(name)
    if chosen.solved_return is not None or chosen.family != "gymnasium" or chosen.make:
        return chosen.solved_return
    try:
        threshold = registered_spec(chosen.gym_id).reward_threshold
    except (gym.error.Error, ImportError, ValueError):
        return None
    return None if threshold is None else float(threshold)


def make_env(name: str, *, training: bool) -> gym.Env:
    """Builds one environment. ``training`` clips Atari rewards; evaluation does not.

    Raises:
        gymnasium.error.Error: an unknown id or a missing optional dependency.
    """
    chosen = preset(name)
    if chosen.atari:
        return make_atari(chosen.gym_id, training=training)
    if chosen.minatar:
        env = _make_minatar(chosen.gym_id, chosen.kwargs)
    elif chosen.make:
        env = flat_observations(_made_by_user(chosen.make, chosen.kwargs), name)
    else:
        env = flat_observations(gym.make(chosen.gym_id, **chosen.kwargs), name)
    return ObservationStack(env, chosen.stack) if chosen.stack != 1 else env


def _made_by_user(make: str, kwargs: Mapping) -> gym.Env:
    """The env a user's factory returns (``[env] make``).

    Raises:
        ValueError: the factory cannot be loaded, raised, or returned no gymnasium env.
    """
    factory = load_entry_point(make, "[env] make")
    try:
        env = factory(**kwargs)
    except Exception as exc:  # a user's code: any error is the env's refusal, said once
        raise ValueError(f"[env] make {make!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(env, gym.Env):
        raise ValueError(
            f"[env] make {make!r} returned a {type(env).__name__}, not a gymnasium.Env"
        )
    return env


def _image(space: gym.spaces.Space) -> bool:
    """A uint8 ``Box`` of two or three dimensions: kept as it is, for a network of
    convolutions (``apex.algorithms.network_choice``)."""
    return (
        isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)
    )


def _flattens(space: gym.spaces.Space) -> bool:
    if isinstance(space, gym.spaces.Tuple):
        return all(_flattens(part) for part in space.spaces)
    if isinstance(space, gym.spaces.Dict):
        return all(_flattens(part) for part in space.spaces.values())
    flat = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)
    return isinstance(space, flat)


def flat_observations(env: gym.Env, name: str) -> gym.Env:
    """``env`` itself where its observations are a flat ``Box`` or an image the networks
    take; else its observations flattened to float32 (the module's docstring).

    Raises:
        ValueError: an observation space that cannot be flattened.
    """
    space = env.observation_space
    if isinstance(space, gym.spaces.Box) and (len(space.shape) == 1 or _image(space)):
        return env
    if not _flattens(space):
        env.close()
        raise ValueError(
            f"{name} has observations of {space}: use a Box, Discrete, "
            "MultiBinary or MultiDiscrete space, or a Tuple or Dict of "
            "them"
        )
    flat = gym.spaces.flatten_space(space)
    low, high = (np.asarray(bound, np.float32) for bound in (flat.low, flat.high))
    flat_space = gym.spaces.Box(low, high, flat.shape, np.float32)
    return gym.wrappers.TransformObservation(
        env,
        lambda observation: gym.spaces.flatten(space, observation).astype(np.float32),
        flat_space,
    )


def make_atari(
    gym_id: str, *, training: bool, noop_max: int = NOOP_MAX, max_frames: int = ATARI_MAX_FRAMES
) -> gym.Env:
    """One ALE game through gymnasium's wrappers, preprocessed as DQN's (actors step
    ale-py's vector env instead, ``apex.envs.vector``, which does the same in C++)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(
        gym_id, frameskip=1, repeat_action_probability=0.0, max_num_frames_per_episode=max_frames
    )
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, noop_max=noop_max)
    env = gym.wrappers.FrameStackObservation(env, 4)
    if training:
        env = gym.wrappers.TransformReward(env, np.sign)
    return env


def _make_minatar(gym_id: str, kwargs: Mapping) -> gym.Env:
    """A MinAtar game (the minimal action set, ``-v1``) with its boolean planes as uint8,
    which the replay stores and sends as it does Atari frames, and an episode limit:
    MinAtar has none, and a good SpaceInvaders agent could otherwise play on for ever.

    ``kwargs`` go to MinAtar but ``hidden_planes``: names of planes the agent is not shown,
    which makes a partially observed game of a fully observed one (Breakout without its
    ``trail``, where the ball was a step before, shows the ball but not where it goes).

    Raises:
        ValueError: a hidden plane the game does not have, or every plane hidden.
    """
    from minatar import gym as minatar_gym  # the minatar extra

    kwargs = dict(kwargs)
    hidden = set(kwargs.pop("hidden_planes", ()))
    if gym_id not in gym.registry:
        minatar_gym.register_envs()
    env = gym.make(gym_id, max_episode_steps=MINATAR_MAX_EPISODE_STEPS, **kwargs)
    channels = env.unwrapped.game.env.channels  # plane name -> index
    if hidden - set(channels) or hidden >= set(channels):
        env.close()
        raise ValueError(
            f"[env] kwargs.hidden_planes {sorted(hidden)}: {gym_id} has the planes "
            f"{sorted(channels, key=channels.get)}, and must keep one"
        )
    kept = np.array(sorted(i for name, i in channels.items() if name not in hidden))
    space = gym.spaces.Box(0, 1, (*env.observation_space.shape[:2], len(kept)), np.uint8)
    return gym.wrappers.TransformObservation(
        env, lambda planes: planes[..., kept].astype(np.uint8), space
    )


def registered_spec(gym_id: str) -> gym.envs.registration.EnvSpec:
    """gymnasium's spec of ``gym_id``, a ``module:Id`` entry point's too (``gym.spec``
    looks only at what is registered; ``gym.make`` imports the module first)."""
    module, _, name = gym_id.rpartition(":")
    if module:
        importlib.import_module(module)
    return gym.spec(name)


def env_factories(name: str, count: int, *, training: bool) -> list[Callable[[], gym.Env]]:
    """``count`` factories of ``name``'s copies, each carrying its preset, so a copy made in
    a process of its own (``apex.envs.stepping``) is the run's env there too; each copy is
    made again where it fails (``apex.envs.guard``)."""
    make = functools.partial(_make_copy, preset(name), training)
    return [functools.partial(GuardedCopy, make, index) for index in range(count)]


def _make_copy(chosen: EnvPreset, training: bool) -> gym.Env:
    # A copy's own process knows none of the run's presets (a user's [env] or [preset])
    # until it is told this one.
    if preset(chosen.name) != chosen:
        register(chosen)
    return make_env(chosen.name, training=training)


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
    # A uint8 image's upper bound, what the networks divide it by: 255 for pixels, 1 for
    # MinAtar's planes.
    observation_high: float = 255.0

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
    if preset(name).extra and not extra_installed(preset(name).extra):
        extra = preset(name).extra
    elif "ale_py" in text or "ale-py" in text:
        extra = "atari"
    elif "box2d" in text:
        extra = "box2d"
    elif "mujoco" in text:
        extra = "mujoco"
    elif "minatar" in text:
        extra = "minatar"
    elif "popgym" in text:
        extra = "popgym"
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
        return shape_of(env, name)
    finally:
        env.close()


def shape_of(env: gym.Env, name: str) -> EnvShape:
    """:func:`env_shape` of an env made already (``name`` for the messages)."""
    space, actions = env.observation_space, env.action_space
    observation = (tuple(space.shape), np.dtype(space.dtype))
    bound = float(np.max(space.high)) if _image(space) else 255.0
    if isinstance(actions, gym.spaces.Discrete):
        return EnvShape(*observation, int(actions.n), observation_high=bound)
    if isinstance(actions, gym.spaces.Box) and len(actions.shape) == 1:
        low, high = actions.low.astype(float), actions.high.astype(float)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError(f"{name}'s Box action space is unbounded: DPG needs bounds")
        return EnvShape(*observation, actions.shape[0], tuple(low), tuple(high))
    raise ValueError(
        f"{name} has a {type(actions).__name__} action space of shape "
        f"{actions.shape}: use Discrete (DQN) or a flat Box (DPG)"
    )
