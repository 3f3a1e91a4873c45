"""R2D2's recurrent Q-network: a torso, an LSTM, and the dueling head.

The torso is the one the observations take elsewhere here (``apex.algorithms.networks``):
an MLP of ``hidden`` for ``(d,)`` vectors; for uint8 images the convolutions of
``apex.algorithms.network_choice``'s rule and their hidden layer. The LSTM of ``units``
cells reads the torso's features step by step (R2D2's 512 over Atari), and the dueling
head ``Q = V + A − mean A`` (Wang et al. 2016) reads the LSTM's output.

The recurrent state is ``(h, c)``, each ``[B, units]``; stored in replay as one array of
``[B, 2, units]`` (``pack``/``unpack``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from apex.algorithms.network_choice import builtin_layout
from apex.algorithms.networks import DuelingHead, checked_layout, image_input, image_torso, mlp

State = tuple[torch.Tensor, torch.Tensor]


def pack(state: State) -> torch.Tensor:
    """``(h, c)`` as one ``[B, 2, units]`` tensor."""
    return torch.stack(state, dim=1)


def unpack(packed: torch.Tensor) -> State:
    """:func:`pack`'s inverse (contiguous, as the LSTM wants them)."""
    return packed[:, 0].contiguous(), packed[:, 1].contiguous()


class RecurrentQNetwork(nn.Module):
    """Q-values of every step of a batch of sequences, from their starting states.

    Args:
        observation_shape: one observation's.
        actions: discrete actions.
        hidden: the MLP torso's widths (vectors), and the head's hidden layer.
        units: the LSTM's cells.
        observation_high: a uint8 image's upper bound (its values are divided by it).

    Raises:
        ValueError: an observation shape no torso takes.
    """

    def __init__(self, observation_shape: Sequence[int], actions: int, hidden: Sequence[int],
                 units: int, observation_high: float = 255.0) -> None:  # fmt: skip
        super().__init__()
        self.observation_rank = len(observation_shape)
        self.layout = None
        if builtin_layout(observation_shape) == "vector":
            self.torso = nn.Sequential(*mlp([observation_shape[0], *hidden]), nn.ReLU())
            features = hidden[-1]
        else:
            self.layout = checked_layout(observation_shape, observation_high)
            features = self.layout.hidden
            convolutions = image_torso(self.layout)
            self.torso = nn.Sequential(*convolutions, nn.Linear(self.layout.features, features),
                                       nn.ReLU())  # fmt: skip
        self.units = units
        self.lstm = nn.LSTM(features, units, batch_first=True)
        self.head = DuelingHead(units, hidden[-1], actions)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        zeros = torch.zeros(batch, self.units, device=device)
        return zeros, zeros.clone()

    def forward(self, observations: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Q-values ``[B, T, actions]`` for observations ``[B, T, ...]``, and the state
        after the last step."""
        batch, steps = observations.shape[:2]
        flat = observations.reshape(batch * steps, *observations.shape[2:])
        inputs = flat.float() if self.layout is None else image_input(flat, self.layout)
        features = self.torso(inputs).reshape(batch, steps, -1)
        h, c = state
        outputs, (h, c) = self.lstm(features, (h.unsqueeze(0), c.unsqueeze(0)))
        q = self.head(outputs.reshape(batch * steps, -1)).reshape(batch, steps, -1)
        return q, (h.squeeze(0), c.squeeze(0))
