"""An actor's DQN: ε-greedy on its copy of the Q-network, and Ape-X's initial priorities
``|R + d · max_a Q(s', a) − Q(s, a)|`` from the values it acted on
(``apex.algorithms.nstep_experience.ValuedNStepExperience``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from apex.algorithms.acting_base import NetworkPolicy
from apex.algorithms.exploration import epsilon_greedy
from apex.algorithms.policy import build_policy, user_network_factory

if TYPE_CHECKING:
    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig


class DQNActing(NetworkPolicy):
    """Its copy of the Q-network: numpy for vector observations, torch's Nature CNN for
    images, a user's ``learner.network`` in torch (``apex.algorithms.policy``)."""

    def __init__(self, config: ActorConfig, shape: EnvShape) -> None:
        self.network = build_policy(
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
        self._actions = shape.actions

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        return self.explore_from(self.values(observations), scales, rng)

    def values(self, observations: np.ndarray) -> np.ndarray:
        """Q(s, ·) per row: what it acts on, and what its priorities reuse."""
        return self.network.q_values(observations)

    def explore_from(self, values: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        return epsilon_greedy(values.argmax(axis=1), scales, self._actions, rng)

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.td_errors_from(self.values(batch["obs"]), self.values(batch["next_obs"]), batch)

    def td_errors_from(
        self, values: np.ndarray, next_values: np.ndarray, batch: dict[str, np.ndarray]
    ) -> np.ndarray:
        """|R + d · max Q(s') − Q(s, a)| from Q(s, ·) and Q(s', ·) per transition."""
        taken = values[np.arange(len(values)), batch["action"]]
        bootstrap = next_values.max(axis=1)
        return np.abs(batch["reward"] + batch["discount"] * bootstrap - taken).astype(np.float64)
