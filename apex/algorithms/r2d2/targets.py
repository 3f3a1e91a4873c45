"""R2D2's value targets and sequence priorities, on numpy arrays or torch tensors alike.

R2D2 (Kapturowski et al. 2019) trains on rescaled values instead of clipped rewards: the
target of an n-step return is ``h(Σ_k γ^k r_{t+k} + γ^n h⁻¹(Q_target(s_{t+n}, a*)))`` with
the invertible ``h(x) = sign(x)(√(|x| + 1) − 1) + εx`` (Pohlen et al. 2018, ε = 1e-3),
and a sequence's priority mixes the largest and the mean of its absolute TD errors,
``p = η max_t |δ_t| + (1 − η) mean_t |δ_t|`` (η = 0.9), over its steps that train.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

RESCALE_EPSILON = 1e-3
PRIORITY_ETA = 0.9

Values = TypeVar("Values")  # an np.ndarray or a torch.Tensor


def _sign(x):
    return np.sign(x) if isinstance(x, np.ndarray) else x.sign()


def rescale(x: Values, epsilon: float = RESCALE_EPSILON) -> Values:
    """``h(x) = sign(x)(√(|x| + 1) − 1) + εx``."""
    return _sign(x) * ((abs(x) + 1) ** 0.5 - 1) + epsilon * x


def unrescale(x: Values, epsilon: float = RESCALE_EPSILON) -> Values:
    """``h⁻¹``: ``sign(x)(((√(1 + 4ε(|x| + 1 + ε)) − 1) / 2ε)² − 1)``."""
    root = (1 + 4 * epsilon * (abs(x) + 1 + epsilon)) ** 0.5
    return _sign(x) * (((root - 1) / (2 * epsilon)) ** 2 - 1)


def sequence_priorities(td_abs: Values, mask: Values, eta: float = PRIORITY_ETA) -> Values:
    """``η max |δ| + (1 − η) mean |δ|`` per sequence (a row of ``td_abs``, ``[B, T]``),
    over the steps where ``mask`` is 1; 0 for a sequence with none."""
    masked = td_abs * mask
    if isinstance(masked, np.ndarray):
        return eta * masked.max(1) + (1 - eta) * masked.sum(1) / np.maximum(mask.sum(1), 1)
    return eta * masked.max(1).values + (1 - eta) * masked.sum(1) / mask.sum(1).clamp(min=1)
