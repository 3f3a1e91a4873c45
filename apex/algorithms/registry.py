"""Every algorithm the system runs, by name, and the choice of one for a run's env.

Each entry is its folder's builder (``apex.algorithms.protocols.AlgorithmBuilder``); an
algorithm is added with its folder and one line in :data:`ALGORITHMS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from apex.algorithms.dpg.builder import DPGBuilder
from apex.algorithms.dqn.builder import DQNBuilder
from apex.algorithms.impala.builder import ImpalaBuilder
from apex.algorithms.protocols import Acting, Algorithm, AlgorithmBuilder
from apex.algorithms.r2d2.builder import R2D2Builder

if TYPE_CHECKING:
    import torch

    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig, LearnerConfig

# In order of preference: "auto" takes the first that fits the env's action space.
ALGORITHMS: tuple[AlgorithmBuilder, ...] = (
    DQNBuilder(),
    DPGBuilder(),
    ImpalaBuilder(),
    R2D2Builder(),
)
BY_NAME: dict[str, AlgorithmBuilder] = {builder.name: builder for builder in ALGORITHMS}
# What a run's ``algorithm`` setting may say: a registered name, or "auto" (from the
# action space).
SETTINGS = ("auto", *BY_NAME)


def actors_noun(algorithm: str) -> str:
    """What a run calls its env copies: Ape-X actors, each exploring at its own scale
    into a prioritized replay; an algorithm of queues' (IMPALA's) are plain actors."""
    builder = BY_NAME.get(algorithm)
    return "actors" if builder is not None and builder.replay == "queue" else "Ape-X actors"


def default_sections() -> dict[str, Any]:
    """Every algorithm's section at its defaults, by name (``RunConfig.algorithms``)."""
    return {builder.name: builder.settings_type() for builder in ALGORITHMS}


def choose(setting: str, shape: EnvShape, env: str = "the environment") -> AlgorithmBuilder:
    """The algorithm a run uses: ``setting``, or with "auto" the first registered one
    that takes the env's action space.

    Raises:
        ValueError: an unknown setting, or an algorithm that does not fit the env.
    """
    if setting not in SETTINGS:
        raise ValueError(f"algorithm must be one of {', '.join(SETTINGS)}, got {setting!r}")
    if setting == "auto":
        builder = next(b for b in ALGORITHMS if b.continuous == shape.continuous)
    else:
        builder = BY_NAME[setting]
    if builder.continuous != shape.continuous:
        fits = ", ".join(b.name for b in ALGORITHMS if b.continuous == shape.continuous)
        kind = "a continuous (Box)" if shape.continuous else "a Discrete"
        needs = "a continuous (Box) one" if builder.continuous else "Discrete"
        raise ValueError(
            f"{env} has {kind} action space: {builder.name.upper()} needs "
            f"{needs}; use algorithm {fits} (or auto)"
        )
    problems = builder.shape_problems(shape, env)
    if problems:
        raise ValueError("; ".join(problems))
    return builder


def replay_items(setting: str) -> str:
    """What one replay item of ``algorithm = setting`` is, in the plural (the builder's
    ``items``); "auto" picks DQN or DPG, whose items are both transitions."""
    builder = BY_NAME.get(setting)
    return builder.items if builder is not None else "transitions"


def build_algorithm(
    config: LearnerConfig, sections: Mapping[str, Any], shape: EnvShape, device: torch.device
) -> Algorithm:
    """The learner's algorithm, with its own section of ``sections`` (by name).

    Raises:
        ValueError: an algorithm that does not fit the env (see :func:`choose`).
    """
    builder = choose(config.algorithm, shape, config.env)
    return builder.build_learner(config, sections[builder.name], shape, device)


def build_acting(config: ActorConfig, sections: Mapping[str, Any], shape: EnvShape) -> Acting:
    """An actor's (or the evaluator's) policy, with its algorithm and section.

    Raises:
        ValueError: an algorithm that does not fit the env (see :func:`choose`).
    """
    builder = choose(config.algorithm, shape, config.env)
    settings = sections[builder.name]
    return Acting(builder.build_acting(config, settings, shape), builder, settings)


def network_problems(config: LearnerConfig, shape: EnvShape) -> list[str]:
    """What refuses the run's network: a user's ``learner.network`` that cannot be built
    or does not give the outputs its algorithm needs (none for the built-in ones)."""
    return choose(config.algorithm, shape, config.env).network_problems(config, shape)


def check_env(name: str, algorithm: str = "auto") -> EnvShape:
    """The shape of ``name``, from one env made here: a misspelled id, a missing extra or
    an env the algorithm cannot take is found before any process starts.

    Raises:
        EnvUnavailable: what is wrong, and what to install where an extra is missing.
    """
    from apex.envs.families import EnvUnavailable, probe_env  # gymnasium: when asked

    shape = probe_env(name)
    try:
        choose(algorithm, shape, name)
    except ValueError as exc:
        raise EnvUnavailable(str(exc)) from exc
    return shape
