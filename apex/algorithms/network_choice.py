"""Which built-in network an observation shape gets, decided without torch (a run's
preflight asks before any process starts): the Nature CNN's convolutions for stacks of
``(c, 84, 84)`` frames, the MinAtar paper's for ``(10, 10, c)`` planes, an MLP for flat
``(d,)`` vectors. Observations of any other shape need a user's ``learner.network``."""

from __future__ import annotations

from collections.abc import Sequence


def builtin_layout(observation_shape: Sequence[int]) -> str | None:
    """ "frames", "planes" or "vector"; None where no built-in network takes the shape."""
    shape = tuple(observation_shape)
    if len(shape) == 3 and shape[1:] == (84, 84):
        return "frames"
    if len(shape) == 3 and shape[:2] == (10, 10):
        return "planes"
    if len(shape) == 1:
        return "vector"
    return None


def builtin_network_problems(observation_shape: Sequence[int], env: str) -> list[str]:
    if builtin_layout(observation_shape) is not None:
        return []
    return [f"{env} has observations of shape {tuple(observation_shape)}: the built-in "
            "networks take (d,), (c, 84, 84) or (10, 10, c); give learner.network, a "
            "factory of your own (launch/README.md)"]  # fmt: skip
