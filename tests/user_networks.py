"""Users' network factories (``learner.network``): a small convolutional one for a
grayscale image no built-in network takes, and ones a run must refuse (outputs of the
wrong size, a factory that raises, one that returns no module)."""

from __future__ import annotations

import torch
from torch import nn


class GrayscaleQ(nn.Module):
    """Q-values from ``[B, H, W]`` uint8 images: one 3x3 convolution, one linear layer."""

    def __init__(self, height: int, width: int, actions: int) -> None:
        super().__init__()
        self.convolution = nn.Conv2d(1, 8, kernel_size=3)
        self.head = nn.Linear(8 * (height - 2) * (width - 2), actions)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.convolution(images.unsqueeze(1).float() / 255.0))
        return self.head(features.flatten(1))


def grayscale_q(observations, actions) -> nn.Module:
    return GrayscaleQ(*observations.shape, int(actions.n))


def wrong_width(observations, actions) -> nn.Module:
    return nn.Linear(observations.shape[0], int(actions.n) + 1)


def raises(observations, actions) -> nn.Module:
    raise RuntimeError("no network today")


def not_a_module(observations, actions) -> str:
    return "a network"
