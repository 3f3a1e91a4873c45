"""An actor's DPG: its numpy copy of the policy and critic 1 (``apex.algorithms.policy``),
acting with Gaussian noise of each env copy's own scale, clipped to the action bounds, and
initial priorities from its copy of critic 1."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from apex.algorithms.acting_base import NetworkPolicy
from apex.algorithms.exploration import gaussian_noise
from apex.algorithms.policy import NumpyActorCritic

if TYPE_CHECKING:
    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig


class DPGActing(NetworkPolicy):
    def __init__(self, config: ActorConfig, shape: EnvShape) -> None:
        self.network = NumpyActorCritic(
            shape.observation_shape[0],
            shape.action_low,
            shape.action_high,
            config.hidden,
            seed=config.actor_seed,
        )

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        network = self.network
        return gaussian_noise(
            network.actions(observations), scales, network.scale, network.offset, rng
        )

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """|R + d · Q1(s', π(s')) − Q1(s, a)| per n-step transition."""
        network = self.network
        taken = network.q(batch["obs"], batch["action"])
        q_next = network.q(batch["next_obs"], network.actions(batch["next_obs"]))
        return np.abs(batch["reward"] + batch["discount"] * q_next - taken).astype(np.float64)
