"""A user's own network, made by a factory: ``learner.network =
"examples.grid_network:q_network"`` in a run config. The learner and every actor call it
with the observation and action spaces (gymnasium's), so all of them build the same
module and the learner's weights load into the actors' copies."""

from __future__ import annotations

import gymnasium as gym
from torch import nn


def q_network(observations: gym.spaces.Box, actions: gym.spaces.Discrete) -> nn.Module:
    """DQN's: Q-values ``[B, actions]`` from a batch of flat observations."""
    (size,) = observations.shape
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(size, 64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, int(actions.n)),
    )
