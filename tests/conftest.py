"""Shared fixtures and reference helpers for the test suite."""

from __future__ import annotations

import math

import numpy as np
import pytest

from replay import TransitionSpec

SMALL_SPEC = TransitionSpec.from_dict(
    {
        "obs": ((4,), "float32"),
        "action": ((), "int64"),
        "reward": ((), "float32"),
        "discount": ((), "float32"),
        "next_obs": ((4,), "float32"),
    }
)


def make_batch(spec: TransitionSpec, count: int, first_id: int = 0) -> dict[str, np.ndarray]:
    """A batch whose every field encodes the item's id, so any slot can be traced back."""
    ids = np.arange(first_id, first_id + count)
    batch = {}
    for name, field in spec.items():
        shape = (count, *field.shape)
        values = np.broadcast_to(ids.reshape((count,) + (1,) * len(field.shape)), shape)
        batch[name] = np.ascontiguousarray(values).astype(field.dtype)
    return batch


def chi2_critical(dof: int, significance: float) -> float:
    """Upper critical value of the chi-square distribution (Wilson-Hilferty; its relative
    error is below 1% for dof >= 10, far smaller than the margins the tests rely on)."""
    z = {1e-2: 2.3263, 1e-3: 3.0902, 1e-4: 3.7190}[significance]
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * math.sqrt(h)) ** 3


@pytest.fixture
def small_spec() -> TransitionSpec:
    return SMALL_SPEC
