"""An actor's IMPALA: it samples actions from its copy of π, keeps ``log μ(a|x)`` of each
for V-trace, and sends its envs' unrolls (``apex.algorithms.impala.unrolls``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from apex.algorithms.acting_base import ActingOnEnvs, NetworkPolicy
from apex.algorithms.impala.unrolls import UnrollBuilder
from apex.algorithms.policy import build_policy_value, user_network_factory

if TYPE_CHECKING:
    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig


class UnrollMaker(ActingOnEnvs):
    """Unrolls from an actor's vector steps, with the log-probabilities its policy acted
    with and, where an episode hit its time limit, the policy's value of the final
    observation (``apex.algorithms.impala.unrolls``). Takes the actor's step as the n-step builder
    does.

    With ``frame_refs`` (frame shards, ``apex.acting.frame_writer``) an unroll keeps no
    observations: its ``refs`` are the env and the frame numbers of its ``T + 1``
    observations, made from the ``(env, frame number)`` pairs each step hands in."""

    def __init__(
        self,
        config: ActorConfig,
        unroll_length: int,
        shape: EnvShape,
        policy: ImpalaActing,
        version: Callable[[], int],
        frame_refs: bool = False,
    ) -> None:
        super().__init__(policy, config.envs_per_actor)
        self._version = version
        self._frame_refs = frame_refs
        kept_shape, kept_dtype = shape.observation_shape, shape.observation_dtype
        if frame_refs:
            kept_shape, kept_dtype = (2,), np.dtype(np.int64)
        self._builder = UnrollBuilder(
            config.envs_per_actor, unroll_length, config.gamma, kept_shape, kept_dtype
        )

    @property
    def discarded(self) -> int:
        """Unrolls left out for a dropped step."""
        return self._builder.discarded

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
        """Returns finished unrolls, one per env, or None. ``final_observations`` are the
        next observations with each ended episode's final one in its place; ``refs``
        (with ``frame_refs``): the ``(env, frame number)`` pairs of ``observations`` and
        of ``final_observations``."""
        final_values = None
        cut = np.logical_and(truncated, np.logical_not(terminated))
        cut = np.flatnonzero(cut if dropped is None else cut & ~dropped)
        if cut.size:
            final_values = np.zeros(len(actions))
            final_values[cut] = self._policy.values(final_observations[cut])
        kept, kept_final = refs if self._frame_refs else (observations, final_observations)
        unrolls = self._builder.step(
            kept,
            actions,
            rewards,
            kept_final,
            terminated,
            truncated,
            self._policy.last_log_probs,
            final_values,
            self._version(),
            dropped,
        )
        if unrolls is not None and self._frame_refs:
            pairs = unrolls.pop("obs")  # (envs, T + 1, 2): env, frame number
            unrolls["refs"] = np.column_stack([pairs[:, 0, 0], pairs[:, :, 1]])
        self._episodes_end(terminated, truncated)
        return unrolls

    def priorities(
        self, batch: dict[str, np.ndarray], epsilon: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """No priorities: a queue hands unrolls out in order (ones, which it ignores)."""
        return batch, np.ones(len(batch["action"]))


def sample_actions(
    logits: np.ndarray, rng: np.random.Generator, greedy: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """An action per row drawn from ``softmax(logits)`` (the most likely one in the rows
    ``greedy`` marks), and its log-probability (float64 softmax, so a row's probabilities
    sum to 1 whatever the logits' scale)."""
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    cumulative = np.cumsum(np.exp(log_probs), axis=1)
    draws = rng.random((len(logits), 1)) * cumulative[:, -1:]
    actions = np.minimum((cumulative <= draws).sum(axis=1), logits.shape[1] - 1)
    if greedy is not None:
        actions = np.where(greedy, logits.argmax(axis=1), actions)
    return actions.astype(np.int64), log_probs[np.arange(len(logits)), actions]


class ImpalaActing(NetworkPolicy):
    """An actor's IMPALA: its copy of π (numpy for vector observations, torch for images),
    sampling actions and keeping their log-probabilities for V-trace.

    Its exploration is π's own randomness: an env copy with scale 1 samples from π, one
    with scale 0 acts greedily (an evaluation). ``last_log_probs`` holds ``log π(a|x)`` of
    the actions of the latest :meth:`explore`, for the unroll."""

    def __init__(self, config: ActorConfig, shape: EnvShape) -> None:
        self.network = build_policy_value(
            shape.observation_shape,
            shape.actions,
            config.hidden,
            seed=config.actor_seed,
            torch_threads=config.torch_threads,
            precision=config.acting_precision,
            requantize_every=config.weight_refresh_steps,
            network=user_network_factory(config.network, shape),
            observation_high=shape.observation_high,
        )
        self.last_log_probs = np.zeros(0)

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        """Sampled actions where ``scales`` > 0, greedy ones where 0."""
        logits, _ = self.network.logits_and_values(observations)
        actions, self.last_log_probs = sample_actions(logits, rng, np.asarray(scales) == 0)
        return actions

    def values(self, observations: np.ndarray) -> np.ndarray:
        """``V(x)`` per row, float64 (the time-limit bootstrap of a truncated episode)."""
        return self.network.logits_and_values(observations)[1].astype(np.float64)
