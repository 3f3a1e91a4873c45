"""Q-networks: a dueling MLP for vector observations and the Nature CNN for images.

Both end in a dueling head, ``Q(s, a) = V(s) + A(s, a) − mean_a A(s, a)`` (Wang et al.
2016). Image observations arrive as uint8 and are scaled to [0, 1] inside ``forward``, on
whatever device the network lives on, so frames travel and are stored as bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class DuelingHead(nn.Module):
    """Value and advantage streams over a feature vector."""

    def __init__(self, features: int, hidden: int, actions: int) -> None:
        super().__init__()
        self.value = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.advantage = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, actions)
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


class DuelingMLP(nn.Module):
    """MLP torso plus dueling head, for observations of shape ``(d,)``.

    Args:
        observation_size: ``d``.
        actions: number of discrete actions.
        hidden: widths of the torso's layers; the head's hidden layer uses the last width.
    """

    def __init__(self, observation_size: int, actions: int, hidden: Sequence[int] = (256, 256)):
        super().__init__()
        layers: list[nn.Module] = []
        width = observation_size
        for size in hidden[:-1]:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.torso = nn.Sequential(*layers)
        self.head = DuelingHead(width, hidden[-1], actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(observations.float()))


class NatureCNN(nn.Module):
    """The DQN Nature torso (Mnih et al. 2015) plus dueling head, for ``(c, 84, 84)`` uint8.

    Args:
        channels: stacked frames ``c``.
        actions: number of discrete actions.
    """

    def __init__(self, channels: int, actions: int) -> None:
        super().__init__()
        self.torso = nn.Sequential(
            nn.Conv2d(channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.head = DuelingHead(64 * 7 * 7, 512, actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(observations.float() / 255.0))


def build_network(
    observation_shape: Sequence[int], actions: int, hidden: Sequence[int]
) -> nn.Module:
    """The network that fits an observation shape: the CNN for ``(c, 84, 84)``, else the MLP.

    Raises:
        ValueError: an observation shape that neither network takes.
    """
    shape = tuple(observation_shape)
    if len(shape) == 3 and shape[1:] == (84, 84):
        return NatureCNN(shape[0], actions)
    if len(shape) == 1:
        return DuelingMLP(shape[0], actions, hidden)
    raise ValueError(f"no network for observations of shape {shape}: use (d,) or (c, 84, 84)")
