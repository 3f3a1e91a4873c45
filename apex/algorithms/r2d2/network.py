"""R2D2's recurrent Q-network: a torso, an LSTM, and the dueling head.

The torso is the one IMPALA's network stands on (``apex.algorithms.networks.feature_torso``):
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

from apex.algorithms.networks import DuelingHead, feature_torso, torso_input

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

    def __init__(
        self,
        observation_shape: Sequence[int],
        actions: int,
        hidden: Sequence[int],
        units: int,
        observation_high: float = 255.0,
    ) -> None:
        super().__init__()
        self.torso, features, self.layout = feature_torso(
            observation_shape, hidden, observation_high
        )
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
        features = self.torso(torso_input(flat, self.layout)).reshape(batch, steps, -1)
        h, c = state
        outputs, (h, c) = self.lstm(features, (h.unsqueeze(0), c.unsqueeze(0)))
        q = self.head(outputs.reshape(batch * steps, -1)).reshape(batch, steps, -1)
        return q, (h.squeeze(0), c.squeeze(0))
