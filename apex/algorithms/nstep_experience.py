"""What an actor of an n-step algorithm sends: n-step transitions of its envs with initial
priorities ``|TD| + ε`` from its own copy of the network (Ape-X computes them actor-side,
so the learner never sees unprioritized data).

:class:`NStepExperience` takes the TD errors from the policy at sending time
(``TDPolicy.td_errors``, DPG's critic). :class:`ValuedNStepExperience` is for a policy
that acts on values it can take the TD errors back from (DQN's Q-values): its priorities
``|R + d · max Q(s') − Q(s, a)|`` need ``Q(s)`` and ``Q(s')`` of each transition, while
``Q(s_t)`` is exactly what it acted with and ``Q(s_{t+n})`` what it acts with n steps
later. It keeps each step's values and runs them through an n-step builder in lock-step
with the transitions' own (the extra forward passes are those of episodes' final
observations, one an episode), so one forward pass a step serves both. The values come
from the weights of the step they were computed at, at most one weight refresh older
than sending-time ones: a priority is an estimate either way.

With frame shards (``frame_refs``) each transition carries frame references instead of
its observations (``refs``: env, frame number of ``s`` and of ``s'``), made from the
``(env, frame number)`` pairs the actor hands in, through a builder in lock-step; a
valued policy's transitions then need no observations at all, and are not copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from apex.algorithms.acting_base import ActingOnEnvs
from apex.algorithms.nstep import NStepBuilder

if TYPE_CHECKING:
    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig

# What a batch carries for its priorities only, never sent.
VALUE_FIELDS = ("values", "next_values")


class TDPolicy(Protocol):
    """An acting policy that can score n-step transitions (``apex.algorithms.protocols``)."""

    def initial_state(self, envs: int) -> Any: ...

    def begin_episodes(self, state: Any, envs: np.ndarray) -> None: ...

    def explore(
        self, observations: np.ndarray, scales: np.ndarray, rng, state: Any
    ) -> np.ndarray: ...

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """``|R + d · bootstrap − Q(s, a)|`` per n-step transition, float64."""


class ValuePolicy(TDPolicy, Protocol):
    """A feed-forward policy that acts on per-action values it can reuse for priorities."""

    def values(self, observations: np.ndarray) -> np.ndarray:
        """The values it acts on, a row per observation (DQN: Q(s, ·))."""

    def explore_from(self, values: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        """:meth:`explore`, from values already computed."""

    def td_errors_from(
        self, values: np.ndarray, next_values: np.ndarray, batch: dict[str, np.ndarray]
    ) -> np.ndarray:
        """:meth:`td_errors`, from the values of ``s`` and of ``s'``."""


def _builder(config: ActorConfig, shape: tuple[int, ...], dtype, spec_action) -> NStepBuilder:
    action_shape, action_dtype = spec_action
    return NStepBuilder(
        config.envs_per_actor,
        config.n_step,
        config.gamma,
        shape,
        np.dtype(dtype),
        action_shape,
        action_dtype,
    )


def action_layout(shape: EnvShape) -> tuple[tuple[int, ...], np.dtype]:
    """One action's shape and dtype: an int64 index, or a float32 vector (``Box``)."""
    if shape.continuous:
        return (shape.actions,), np.dtype(np.float32)
    return (), np.dtype(np.int64)


class NStepExperience(ActingOnEnvs):
    """n-step transitions of an actor's envs, prioritized by the policy's ``td_errors``.

    Args:
        config: the actor's settings (``envs_per_actor``, ``n_step``, ``gamma``).
        shape: its env's.
        policy: what it acts with.
        frame_refs: with frame shards: frame references ride along (``refs``).
    """

    def __init__(
        self, config: ActorConfig, shape: EnvShape, policy: TDPolicy, frame_refs: bool
    ) -> None:
        super().__init__(policy, config.envs_per_actor)
        self._action = action_layout(shape)
        self._observations: NStepBuilder | None = self._observation_builder(
            config, shape, frame_refs
        )
        self._refs = _builder(config, (2,), np.int64, self._action) if frame_refs else None

    def _observation_builder(
        self, config: ActorConfig, shape: EnvShape, frame_refs: bool
    ) -> NStepBuilder | None:
        # The TD errors are computed from the observations: they are built even where
        # frame references go in their place.
        return _builder(config, shape.observation_shape, shape.observation_dtype, self._action)

    @property
    def discarded(self) -> int:
        """Transitions that dropped steps took with them."""
        return (self._observations or self._refs).discarded

    def step(
        self,
        observations,
        actions,
        rewards,
        next_observations,
        final_observations,
        terminated,
        truncated,
        refs=None,
        dropped=None,
    ):
        out = None
        if self._observations is not None:
            out = self._observations.step(
                observations, actions, rewards, final_observations, terminated, truncated, dropped
            )
        if self._refs is not None:
            made = self._refs.step(
                refs[0], actions, rewards, refs[1], terminated, truncated, dropped
            )
            if out is None:
                out = {name: made[name] for name in ("action", "reward", "discount")}
            out["refs"] = np.column_stack([made["obs"], made["next_obs"][:, 1]])
        self._episodes_end(terminated, truncated)
        return out

    def priorities(
        self, batch: dict[str, np.ndarray], epsilon: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        return batch, self._policy.td_errors(batch) + epsilon


class ValuedNStepExperience(NStepExperience):
    """n-step transitions whose priorities reuse the values the policy acted on (the
    module docstring); a feed-forward policy's (its state is None)."""

    def __init__(
        self,
        config: ActorConfig,
        shape: EnvShape,
        policy: ValuePolicy,
        version: Callable[[], int],
        frame_refs: bool,
    ) -> None:
        super().__init__(config, shape, policy, frame_refs)
        self._version = version
        self._values: np.ndarray | None = None  # of the observations acted on next
        self._values_version = -1
        self._value_builder = _builder(config, (shape.actions,), np.float32, self._action)

    def _observation_builder(self, config, shape, frame_refs):
        # Priorities come from the values: with frame references nothing needs the stacks.
        if frame_refs:
            return None
        return super()._observation_builder(config, shape, frame_refs)

    def act(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        if self._values is None or self._values_version != self._version():
            # New weights since the values were computed: act on the newest.
            self._values = self._policy.values(observations)
            self._values_version = self._version()
        return self._policy.explore_from(self._values, scales, rng)

    def step(
        self,
        observations,
        actions,
        rewards,
        next_observations,
        final_observations,
        terminated,
        truncated,
        refs=None,
        dropped=None,
    ):
        out = super().step(
            observations,
            actions,
            rewards,
            next_observations,
            final_observations,
            terminated,
            truncated,
            refs,
            dropped,
        )
        ended = np.logical_or(terminated, truncated)
        next_values = self._policy.values(next_observations)
        final_values = next_values
        if ended.any():
            final_values = next_values.copy()
            final_values[ended] = self._policy.values(final_observations[ended])
        values = self._value_builder.step(
            self._values, actions, rewards, final_values, terminated, truncated, dropped
        )
        out["values"], out["next_values"] = values["obs"], values["next_obs"]
        self._values, self._values_version = next_values, self._version()
        return out

    def priorities(
        self, batch: dict[str, np.ndarray], epsilon: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        errors = self._policy.td_errors_from(batch["values"], batch["next_values"], batch)
        sent = {name: array for name, array in batch.items() if name not in VALUE_FIELDS}
        return sent, errors + epsilon
