"""The algorithm seam: what the learner loop and the actors need of an algorithm, and the
registry that names every algorithm.

The loop (``apex.learning.learner``), the actor loop (``apex.acting.actor``) and the launch code
never know which algorithm runs. The learner holds an :class:`Algorithm` (one update per batch,
new priorities out); an actor holds an :class:`ActingPolicy` (exploring actions, and the
initial priorities Ape-X computes actor-side). Both come from the algorithm's module,
which :data:`ALGORITHMS` names:

- ``Settings``: a frozen dataclass, the run config's ``[learner.NAME]`` section, with
  ``problems(prefix)``;
- ``build_learner(config, settings, shape, device) -> Algorithm``;
- ``build_acting(actor_config, shape) -> ActingPolicy``;
- ``shape_problems(shape, env) -> list[str]``: what the algorithm cannot take beyond its
  action space (DPG: image observations);

and, where an algorithm's actors send something else than n-step transitions (IMPALA's
unrolls), ``transition_spec(shape, actor_config)`` and
``build_experience(actor_config, shape, policy, version)``, the builder the actor feeds
its steps (``version()``: the policy version it acts with now).

A module is imported only when its algorithm is used, and imports torch only where it
trains or acts on images, so a CartPole actor never pays torch's import. Adding an
algorithm is one module with those four names and one line in :data:`ALGORITHMS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch import nn

    from apex.algorithms.optimizer import Adam
    from apex.algorithms.updates import StepResult
    from apex.envs.families import EnvShape
    from apex.learning.staging import DeviceBatch
    from apex.settings import ActorConfig, LearnerConfig
    from replay.store.spec import TransitionSpec


class Algorithm(Protocol):
    """An off-policy learner on prioritized replay."""

    @property
    def policy(self) -> nn.Module:
        """The network published to the actors and evaluated greedily."""

    @property
    def optimizers(self) -> list[Adam]:
        """Every optimizer it steps (a learning-rate schedule sets their rate)."""

    def step(self, batch: DeviceBatch) -> StepResult:
        """One update; ``StepResult.new_priorities`` has one value per batch item."""

    def state_dict(self) -> dict:
        """Everything to resume from: tensors and plain containers only (checkpoints
        are read with ``weights_only=True``)."""

    def load_state_dict(self, state: dict) -> None:
        """Takes back what :meth:`state_dict` gave (older checkpoints may lack ``steps``)."""

    @property
    def keeps_confirmed_weights(self) -> bool:
        """Whether :meth:`solved` uses the confirmed weights (the learner keeps its
        newest publications' weights only then)."""

    @property
    def follows_better_confirmations(self) -> bool:
        """Whether later confirmations that beat the best confirmed mean are asked for
        and passed to :meth:`solved` again."""

    def solved(self, confirmed: dict[str, torch.Tensor] | None = None) -> None:
        """The run is solved (a confirmed solve, in this life of the learner or one
        before) and trains on: what changes from now on (DQN's averaged policy may start
        here). Called when the learner hears the solve, with ``confirmed``, the weights
        the evaluation confirmed (a copy of the policy's parameters, when still kept),
        and when a learner resumes a solved run, with None; where it follows better
        confirmations, again with each one's weights."""

    def back_to_anchor(self) -> bool:
        """A settled run's periodic evaluation fell under the target: put the weights
        training is held to back in place, where the algorithm keeps such weights;
        whether it did (DQN's ``Settings.back_to_anchor``)."""


class ActingPolicy(Protocol):
    """What an actor acts with: its copy of the learner's network, as numpy arrays in and
    out (``apex.weights.WeightSubscriber`` loads the learner's weights into it)."""

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """The learner's ``state_dict`` names and shapes this policy takes."""

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Takes the learner's weights."""

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        """An action per row of ``observations``, each env copy exploring with its own
        fixed scale (``scales``: ε, or a noise σ)."""

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """``|R + d · bootstrap − Q(s, a)|`` per n-step transition, float64 (priorities
        before their ε)."""


@dataclass(frozen=True)
class AlgorithmEntry:
    """One registered algorithm.

    Attributes:
        name: what ``algorithm = NAME`` selects, and its config section ``[learner.NAME]``.
        continuous: the action space it takes (a bounded ``Box``), or ``Discrete``.
        module: the module with ``Settings``, ``build_learner``, ``build_acting`` and
            ``shape_problems``.
        exploration: the actor setting that is its base exploration scale, spread over the
            run's env copies (``apex.algorithms.exploration.env_epsilons``); None: the policy
            explores by itself (IMPALA samples from π), every copy at scale 1.
        symbol: how the actors' logs name that scale.
        replay: "prioritized" (the sum-tree shards) or "queue" (each item handed out once,
            oldest first: ``replay.store.queue``).
    """

    name: str
    continuous: bool
    module: str
    exploration: str | None
    symbol: str
    replay: str = "prioritized"

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


ALGORITHMS = (
    AlgorithmEntry(
        "dqn",
        continuous=False,
        module="apex.algorithms.dqn.learner",
        exploration="epsilon",
        symbol="ε",
    ),
    AlgorithmEntry(
        "dpg",
        continuous=True,
        module="apex.algorithms.dpg.learner",
        exploration="noise_scale",
        symbol="σ",
    ),
    AlgorithmEntry(
        "impala",
        continuous=False,
        module="apex.algorithms.impala.learner",
        exploration=None,
        symbol="π",
        replay="queue",
    ),
)
BY_NAME = {entry.name: entry for entry in ALGORITHMS}
# What a run's ``algorithm`` setting may say: a registered name, or "auto" (from the
# action space).
SETTINGS = ("auto", *BY_NAME)


def default_settings() -> dict[str, Any]:
    """Every algorithm's section at its defaults, by name (``LearnerConfig.algorithms``)."""
    return {entry.name: entry.load().Settings() for entry in ALGORITHMS}


def choose(setting: str, shape: EnvShape, env: str = "the environment") -> AlgorithmEntry:
    """The algorithm a run uses: ``setting``, or with "auto" the first registered one
    that takes the env's action space.

    Raises:
        ValueError: an unknown setting, or an algorithm that does not fit the env.
    """
    if setting not in SETTINGS:
        raise ValueError(f"algorithm must be one of {', '.join(SETTINGS)}, got {setting!r}")
    if setting == "auto":
        entry = next(e for e in ALGORITHMS if e.continuous == shape.continuous)
    else:
        entry = BY_NAME[setting]
    if entry.continuous != shape.continuous:
        fits = ", ".join(e.name for e in ALGORITHMS if e.continuous == shape.continuous)
        kind = "a continuous (Box)" if shape.continuous else "a Discrete"
        needs = "a continuous (Box) one" if entry.continuous else "Discrete"
        raise ValueError(f"{env} has {kind} action space: {entry.name.upper()} needs {needs}; "
                         f"use algorithm {fits} (or auto)")  # fmt: skip
    problems = entry.load().shape_problems(shape, env)
    if problems:
        raise ValueError("; ".join(problems))
    return entry


def build_algorithm(config: LearnerConfig, shape: EnvShape, device: torch.device) -> Algorithm:
    """The learner's algorithm, with its own config section.

    Raises:
        ValueError: an algorithm that does not fit the env (see :func:`choose`).
    """
    entry = choose(config.algorithm, shape, config.env)
    return entry.load().build_learner(config, config.algorithms[entry.name], shape, device)


def transition_spec(entry: AlgorithmEntry, shape: EnvShape, actor: ActorConfig) -> TransitionSpec:
    """What the run's actors send and its shards keep: the algorithm's own spec where it
    has one (IMPALA: unrolls), the env's n-step transition otherwise."""
    own = getattr(entry.load(), "transition_spec", None)
    return own(shape, actor) if own is not None else shape.transition_spec()


def build_acting(config: ActorConfig, shape: EnvShape) -> tuple[ActingPolicy, AlgorithmEntry]:
    """An actor's policy, and the entry of the algorithm it acts for.

    Raises:
        ValueError: an algorithm that does not fit the env (see :func:`choose`).
    """
    entry = choose(config.algorithm, shape, config.env)
    return entry.load().build_acting(config, shape), entry
