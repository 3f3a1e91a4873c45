"""What an algorithm is to the rest of the system: one builder that makes every part of it.

The learner loop (``apex.learning.learner``), the actor loop (``apex.acting.actor``), the
evaluator and the launch code never know which algorithm runs. Each algorithm is a folder
of ``apex.algorithms`` with an :class:`AlgorithmBuilder` that makes, from the run's
settings and the env's shape, everything the others need:

- its settings section, a frozen dataclass (``[dqn]``, ``[dpg]``, ``[impala]`` in a run
  config), which validates itself;
- what its actors send and its shards keep (a :class:`TransitionSpec`: n-step transitions,
  or IMPALA's unrolls), and which replay keeps them (prioritized shards or queues);
- the learner's :class:`Algorithm`, one update per batch;
- an actor's :class:`ActingPolicy`, and the :class:`ExperienceBuilder` that turns the
  actor's steps into what it sends, with the initial priorities;
- the base exploration scale its actors spread over their env copies.

Every builder implements all of it; nothing is looked up by name at run time. Adding an
algorithm is one folder with its builder and one line in ``apex.algorithms.registry``.
Nothing here imports torch: a CartPole actor never pays its import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

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

ReplayKind = Literal["prioritized", "queue"]


class AlgorithmSettings(Protocol):
    """An algorithm's section of the run config: a frozen dataclass of plain values."""

    def problems(self, prefix: str) -> list[str]:
        """Every problem with these settings, each naming ``prefix + field`` (empty: none)."""


SettingsT = TypeVar("SettingsT", bound=AlgorithmSettings)


class Algorithm(Protocol):
    """The learner's side: networks, optimizers and one update per batch."""

    @property
    def variant(self) -> str:
        """What trains, for the run's records (``DoubleDQN``, ``DDPG``, ``TD3``, ``IMPALA``)."""

    @property
    def policy(self) -> nn.Module:
        """The network published to the actors and the evaluator."""

    @property
    def optimizers(self) -> list[Adam]:
        """Every optimizer it steps (a learning-rate schedule sets their rate)."""

    def step(self, batch: DeviceBatch) -> StepResult:
        """One update; ``StepResult.new_priorities`` has one value per batch item (None:
        a queue's items have none)."""

    def state_dict(self) -> dict:
        """Everything to resume from: tensors and plain containers only (checkpoints
        are read with ``weights_only=True``)."""

    def load_state_dict(self, state: dict) -> None:
        """Takes back what :meth:`state_dict` gave (older checkpoints may lack ``steps``);
        keys it does not know are the learning loop's and are ignored."""


class ActingPolicy(Protocol):
    """What an actor or the evaluator acts with: its copy of the learner's network, numpy
    arrays in and out (``apex.weights.WeightSubscriber`` loads the learner's weights).

    A policy may carry state from step to step for each env it acts in (a recurrent
    one's memory). The caller holds that state: it asks for :meth:`initial_state` for its
    envs, passes it to every :meth:`explore`, and calls :meth:`begin_episodes` for the
    envs whose episode starts (all of them after a reset, then those that ended). A
    feed-forward policy's state is None and its ``begin_episodes`` does nothing.
    """

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """The learner's ``state_dict`` names and shapes this policy takes."""

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Takes the learner's weights."""

    def initial_state(self, envs: int) -> Any:
        """The state of ``envs`` envs before their first step (None: no state)."""

    def begin_episodes(self, state: Any, envs: np.ndarray) -> None:
        """The episodes of the envs at indices ``envs`` start: their state is reset, in
        place."""

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state: Any) -> np.ndarray:
        """An action per row of ``observations``, each env exploring with its own fixed
        scale (``scales``: ε, a noise σ; 0 is greedy); ``state`` moves on in place."""


class ExperienceBuilder(Protocol):
    """An actor's builder of what it sends, from its envs' steps, with their initial
    priorities (``apex.acting.experience`` feeds it; one per env group)."""

    def begin(self, observations: np.ndarray) -> None:
        """The envs' first observations, after their reset: every episode starts."""

    def act(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        """Actions for ``observations``, each env exploring at its scale."""

    def step(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        final_observations: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        refs: tuple[np.ndarray, np.ndarray] | None,
        dropped: np.ndarray | None = None,
    ) -> dict[str, np.ndarray] | None:
        """One vector step; what it completes (None or empty arrays: nothing).
        ``next_observations`` are what the envs go on from (reset ones where an episode
        ended), ``final_observations`` the step's own (an ended episode's final one);
        ``refs``, with frame shards, the ``(env, frame number)`` pairs of
        ``observations`` and ``final_observations``, which replace the observations in
        what is sent (a ``refs`` field). ``dropped``: per env, the step failed
        (``apex.envs.guard``; marked truncated too): nothing that holds it is sent."""

    @property
    def discarded(self) -> int:
        """Items (transitions, unrolls, sequences) that dropped steps took with them."""

    def priorities(
        self, batch: dict[str, np.ndarray], epsilon: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The batch as it is sent, and its initial priorities (``|TD| + epsilon``)."""


class AlgorithmBuilder(Protocol, Generic[SettingsT]):
    """Everything of one algorithm, made from the run's settings and the env's shape.

    Attributes:
        name: what ``algorithm = NAME`` selects, and its config section ``[NAME]``.
        continuous: the action space it takes: a bounded flat ``Box``, or ``Discrete``.
        replay: "prioritized" (the sum-tree shards) or "queue" (each item handed out
            once, oldest first: ``replay.store.queue``).
        exploration_symbol: how the actors' logs name its exploration scale (ε, σ, π).
        items: what one replay item of it is, in the plural ("transitions", "unrolls",
            "sequences"): what the run's progress lines count.
        settings_type: its section's dataclass; its defaults are the section's.
        run_defaults: run config sections every run of it starts from, over the env
            preset's settings (IMPALA: queues of unrolls); the preset's settings for it
            go over these (``apex.envs.presets``).
    """

    name: str
    continuous: bool
    replay: ReplayKind
    exploration_symbol: str
    items: str
    settings_type: type[SettingsT]
    run_defaults: Mapping[str, object]

    def shape_problems(self, shape: EnvShape, env: str) -> list[str]:
        """What it cannot take of the env beyond its action space (DPG: images)."""

    def network_problems(self, config: LearnerConfig, shape: EnvShape) -> list[str]:
        """What is wrong with a user's network (``config.network``) for it: one that
        cannot be built, or whose outputs do not fit the env's actions."""

    def exploration_scale(self, settings: SettingsT) -> float | None:
        """The base exploration scale its actors spread over the run's env copies
        (``apex.algorithms.exploration.env_epsilons``); None: the policy explores by itself
        (IMPALA samples from π), every copy at scale 1."""

    def transition_spec(
        self, shape: EnvShape, actor: ActorConfig, settings: SettingsT
    ) -> TransitionSpec:
        """What its actors send and its shards keep."""

    def build_learner(
        self, config: LearnerConfig, settings: SettingsT, shape: EnvShape, device: torch.device
    ) -> Algorithm:
        """The learner's algorithm, its networks on ``device``."""

    def build_acting(
        self, actor: ActorConfig, settings: SettingsT, shape: EnvShape
    ) -> ActingPolicy:
        """An actor's (or the evaluator's) policy."""

    def build_experience(
        self,
        actor: ActorConfig,
        settings: SettingsT,
        shape: EnvShape,
        policy: ActingPolicy,
        version: Callable[[], int],
        frame_refs: bool,
    ) -> ExperienceBuilder:
        """An actor's builder for ``actor.envs_per_actor`` envs acting with ``policy``
        (made by :meth:`build_acting`); ``version()``: the policy version it acts with
        now; ``frame_refs``: with frame shards, frame references instead of observations."""


@dataclass(frozen=True)
class Acting:
    """What an actor acts with: its policy, and the algorithm and settings it is for."""

    policy: ActingPolicy
    builder: AlgorithmBuilder
    settings: Any

    def transition_spec(self, shape: EnvShape, actor: ActorConfig) -> TransitionSpec:
        return self.builder.transition_spec(shape, actor, self.settings)

    def exploration_scale(self) -> float | None:
        return self.builder.exploration_scale(self.settings)

    def experience(
        self, actor: ActorConfig, shape: EnvShape, version: Callable[[], int], frame_refs: bool
    ) -> ExperienceBuilder:
        return self.builder.build_experience(
            actor, self.settings, shape, self.policy, version, frame_refs
        )
