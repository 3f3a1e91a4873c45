"""What the learner loop needs of an algorithm: one update per batch, new priorities out.

The loop (``apex.learner``), the actors and the launch code never know which algorithm
runs; they hold an :class:`Algorithm`. Double DQN (``apex.dqn.DoubleDQN``) is the first;
a continuous-control one sits beside it by offering the same methods.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from apex.dqn import DoubleDQN, StepResult
from apex.envs import EnvShape
from apex.settings import LearnerConfig
from apex.staging import DeviceBatch


class Algorithm(Protocol):
    """An off-policy learner on prioritized replay."""

    @property
    def policy(self) -> nn.Module:
        """The network published to the actors and evaluated greedily."""

    def step(self, batch: DeviceBatch) -> StepResult:
        """One update; ``StepResult.new_priorities`` has one value per batch item."""

    def state_dict(self) -> dict:
        """Everything to resume from: tensors and plain containers only (checkpoints
        are read with ``weights_only=True``)."""

    def load_state_dict(self, state: dict) -> None:
        """Takes back what :meth:`state_dict` gave (older checkpoints may lack ``steps``)."""


def build_algorithm(config: LearnerConfig, shape: EnvShape, device: torch.device) -> Algorithm:
    """The algorithm a learner config names (double DQN today)."""
    return DoubleDQN(config, shape.observation_shape, shape.actions, device)
