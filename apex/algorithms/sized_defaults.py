"""The one rule for the defaults of a task without preset settings (a gymnasium id, a user's
env, a named env on its family's defaults), for every algorithm.

The run-wide defaults are the papers', for Atari on a GPU: a replay of 1M, 50K
transitions before the first update, batches of 512. On a small task, or on a CPU
learner, they spend minutes warming up and learn at a few updates a second. What the run
knows before it starts decides instead: the kind of observation (the built-in network it
gets, ``apex.algorithms.network_choice``), the episode limit ``T`` (the spec's
``max_episode_steps``; 1,000 where it has none), the action space (it picks the
algorithm under ``auto``), and, for Atari-sized images only, the learner's device.

- an Atari-sized image (sides of 36 and more) with the learner on CUDA: the papers'
  settings, as they are;
- any other: one actor process of 8 env copies; an evaluation every ``10 T`` steps
  (2K-50K); for a replay of transitions (DQN, DPG) ``200 T`` of them (50K-1M) and a
  warm-up of ``2 T`` (1K-50K); then the algorithm's ``[sized.KIND]`` tables of its
  ``defaults.toml``, KIND the observation's: ``vector``, ``small_image`` (sides of 4 to
  35) or ``image``.

Settings an env preset gives for the algorithm go over these, and a run config file and
``--set`` over those. ``apex train --explain`` prints what chose each value.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from apex.algorithms.network_choice import image_layout
from apex.algorithms.registry import ALGORITHMS, BY_NAME
from apex.envs.families import make_env, shape_of
from apex.envs.presets import preset

# Where a spec gives no episode limit.
UNLIMITED_EPISODE_STEPS = 1_000
KIND_WORDS = {"vector": "vector", "small_image": "small-image", "image": "Atari-sized image"}


@dataclass(frozen=True)
class SizedDefaults:
    """The rule's settings for one run, and what chose each.

    Attributes:
        settings: run config sections, as a file gives them.
        said: one line for the start of the run: the algorithm, the task, the learner.
        reasons: ``(setting, value, why)``, each setting the rule chose.
    """

    settings: dict = field(default_factory=dict)
    said: str = ""
    reasons: tuple[tuple[str, object, str], ...] = ()


def _clamped(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def observation_kind(observation_shape: Sequence[int]) -> str:
    """ "vector", "small_image" or "image": the built-in network's kind of input (an
    observation no built-in network takes is sized as a vector)."""
    layout = image_layout(observation_shape)
    if layout is None:
        return "vector"
    return "image" if layout.torso == "nature" else "small_image"


def rule(algorithm: str, kind: str, episode_limit: int | None, cuda: bool) -> SizedDefaults:
    """The module's rule for ``algorithm`` (a registered name) on a task of ``kind`` and
    ``episode_limit`` steps (None: none), with a CUDA learner or not."""
    builder = BY_NAME[algorithm]
    learner = "CUDA" if cuda else "CPU"
    steps = episode_limit or UNLIMITED_EPISODE_STEPS
    limit = f"{episode_limit}-step" if episode_limit else "unlimited (1,000 assumed)"
    task = f"{algorithm.upper()} on a {KIND_WORDS[kind]} task of {limit} episodes"
    if kind == "image" and cuda:
        return SizedDefaults({}, f"{task}, {learner} learner: the papers' settings")
    reasons: list[tuple[str, object, str]] = [
        ("actors", 1, "one actor process: on a small task the learner is what a run waits on"),
        ("actor.envs_per_actor", 8, "8 env copies in it"),
        (
            "learner.eval_every_steps",
            _clamped(10 * steps, 2_000, 50_000),
            f"10 episodes of {steps:,} steps, within 2,000..50,000",
        ),
    ]
    if builder.replay == "prioritized" and builder.items == "transitions":
        reasons += [
            (
                "replay.capacity",
                _clamped(200 * steps, 50_000, 1_000_000),
                f"200 episodes of {steps:,} steps, within 50,000..1,000,000",
            ),
            (
                "replay.min_size",
                _clamped(2 * steps, 1_000, 50_000),
                f"2 episodes of {steps:,} steps, within 1,000..50,000",
            ),
        ]
    where = f"{builder.name}/defaults.toml [sized.{kind}]"
    reasons += [(name, value, where) for name, value in _flat(builder_sized(builder, kind))]
    settings: dict = {}
    for name, value, _ in reasons:
        merged_into(settings, name, value)
    return SizedDefaults(settings, f"{task}, {learner} learner", tuple(reasons))


def builder_sized(builder, kind: str) -> dict:
    return {k: dict(v) for k, v in builder.defaults.sized[kind].items()}


def _flat(sections: dict, prefix: str = "") -> list[tuple[str, object]]:
    flat = []
    for key, value in sections.items():
        if isinstance(value, dict):
            flat += _flat(value, f"{prefix}{key}.")
        else:
            flat.append((f"{prefix}{key}", value))
    return flat


def merged_into(settings: dict, dotted: str, value: object) -> None:
    *sections, key = dotted.split(".")
    table = settings
    for section in sections:
        table = table.setdefault(section, {})
    table[key] = value


def task_defaults(name: str, algorithm: str, cuda: bool | None = None) -> SizedDefaults:
    """:func:`rule` for env ``name`` run by ``algorithm`` (a name, or "auto"), where it
    applies: envs of the gymnasium family whose preset has no settings of its own for
    every algorithm (settings of one algorithm's go over these). An empty result where
    it does not apply, and where the env cannot be made here (the preflight says why).
    ``cuda``: whether the learner is on CUDA (None: whether this machine has it; asked
    only for an Atari-sized image)."""
    chosen = preset(name)
    if chosen.defaults or chosen.family != "gymnasium":
        return SizedDefaults()
    key = json.dumps(
        [chosen.gym_id, chosen.make, dict(chosen.kwargs), chosen.stack], sort_keys=True, default=str
    )
    probed = _probed(name, key)
    if probed is None:
        return SizedDefaults()
    shape, continuous, limit = probed
    if algorithm == "auto":
        algorithm = next(b.name for b in ALGORITHMS if b.continuous == continuous)
    if algorithm not in BY_NAME:
        return SizedDefaults()  # the config's own check says why
    kind = observation_kind(shape)
    if kind == "image" and cuda is None:
        cuda = _cuda_here()
    return rule(algorithm, kind, limit, bool(cuda))


def cuda_asked(values: dict) -> bool | None:
    """Whether a run's learner is on CUDA as far as its config's values say (None: they
    leave it to the machine): ``learner.device``, else GPUs asked of Slurm."""
    learner, slurm = values.get("learner", {}), values.get("slurm", {})
    device = str(learner.get("device", "auto")) if isinstance(learner, dict) else "auto"
    if device != "auto":
        return device.startswith("cuda")
    gpus = slurm.get("learner_gpus", 0) if isinstance(slurm, dict) else 0
    return True if isinstance(gpus, int) and gpus > 0 else None


def _cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


@functools.lru_cache(maxsize=64)
def _probed(name: str, key: str) -> tuple[tuple[int, ...], bool, int | None] | None:
    try:
        env = make_env(name, training=True)
    except Exception:  # any failure is the preflight's to report
        return None
    try:
        shape = shape_of(env, name)
        limit = env.spec.max_episode_steps if env.spec is not None else None
    except ValueError:
        return None
    finally:
        env.close()
    return tuple(shape.observation_shape), shape.continuous, limit
