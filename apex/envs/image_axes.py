"""Which axis of a three-dimensional image observation holds its planes: the first where it
is smaller than both others (``(c, h, w)``, PyTorch's order), else the last (``(h, w, c)``,
MinAtar's and most envs'). The built-in networks (``apex.algorithms.network_choice``) and
observation stacks (``apex.envs.observation_stack``) read it alike."""

from __future__ import annotations

from collections.abc import Sequence


def channels_first(shape: Sequence[int]) -> bool:
    """Whether the planes of an image of ``shape`` (three dimensions) come first."""
    return shape[0] < min(shape[1], shape[2])
