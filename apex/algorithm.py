"""What the learner loop needs of an algorithm: one update per batch, new priorities out.

The loop (``apex.learner``), the actors and the launch code never know which algorithm
runs; they hold an :class:`Algorithm`: double DQN (``apex.dqn.DoubleDQN``) for discrete
actions, DPG with TD3's fixes (``apex.dpg.DPG``) for continuous ones.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from apex.dpg import DPG
from apex.dqn import DoubleDQN, StepResult
from apex.envs import EnvShape, choose_algorithm
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
    """The algorithm a learner config names, or the action space calls for ("auto").

    Raises:
        ValueError: an algorithm that does not fit the env (see ``choose_algorithm``).
    """
    if choose_algorithm(config.algorithm, shape, config.env) == "dpg":
        return DPG(config, shape.observation_shape[0], shape.action_low, shape.action_high,
                   device)  # fmt: skip
    return DoubleDQN(config, shape.observation_shape, shape.actions, device)
