"""V-trace targets (Espeholt et al. 2018, IMPALA, section 4.1), vectorised over time and batch.

For an unroll of length T made by a behaviour policy μ and learned on by a target policy π,
with values V(x_t), discounts γ_t (0 where an episode ended), importance weights
ρ_t = min(ρ̄, π(a_t|x_t)/μ(a_t|x_t)) and c_i = min(c̄, π(a_i|x_i)/μ(a_i|x_i)):

    v_s = V(x_s) + Σ_{t=s}^{T-1} (Π_{i=s}^{t-1} γ_i c_i) δ_t
    δ_t = ρ_t (r_t + γ_t V(x_{t+1}) − V(x_t))

with V(x_T) the bootstrap value. The policy gradient uses the advantage
ρ^pg_s (r_s + γ_s v_{s+1} − V(x_s)), with v_T = V(x_T) and ρ^pg_s = min(ρ̄_pg, π/μ).

The sum is computed as one triangular matrix product per batch column rather than the
paper's backward recursion: the recursion is T dependent steps (T kernel launches each on a
GPU), the product a handful of batched operations. The products Π γ_i c_i are cumulative
products, not sums of logarithms, so a zero discount or a zero trace cuts them exactly.
Arrays are time-major, ``[T, B]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class VTraceTargets:
    """``vs``: the value targets v_s, ``[T, B]``; ``pg_advantages``: the policy gradient's
    advantages, ``[T, B]``. Both carry no gradient."""

    vs: torch.Tensor
    pg_advantages: torch.Tensor


def _check(name: str, tensor: torch.Tensor, shape: torch.Size) -> None:
    if tensor.shape != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {tuple(shape)}")


@torch.no_grad()
def vtrace_targets(
    behaviour_log_probs: torch.Tensor,
    target_log_probs: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float | None = None,
) -> VTraceTargets:
    """V-trace targets for a batch of unrolls.

    Args:
        behaviour_log_probs: log μ(a_t|x_t), ``[T, B]``.
        target_log_probs: log π(a_t|x_t), ``[T, B]``.
        rewards: r_t, ``[T, B]``.
        discounts: γ_t, ``[T, B]``: the discount times (1 − terminated_t).
        values: V(x_t), ``[T, B]``.
        bootstrap_value: V(x_T), ``[B]``.
        rho_bar: ρ̄, the truncation of the importance weights in δ_t; ``inf`` for none.
        c_bar: c̄, the truncation of the traces; ``inf`` for none.
        pg_rho_bar: the truncation of the policy gradient's weights; ``rho_bar`` if None.
    """
    shape = values.shape
    if values.dim() != 2:
        raise ValueError(f"values must be [T, B], got shape {tuple(shape)}")
    for name, tensor in (
        ("behaviour_log_probs", behaviour_log_probs),
        ("target_log_probs", target_log_probs),
        ("rewards", rewards),
        ("discounts", discounts),
    ):
        _check(name, tensor, shape)
    _check("bootstrap_value", bootstrap_value, shape[1:])
    if not (rho_bar > 0 and c_bar > 0):
        raise ValueError(f"rho_bar and c_bar must be positive, got {rho_bar} and {c_bar}")
    if c_bar > rho_bar:
        # The paper requires c̄ <= ρ̄: traces cut no later than the fixed point moves.
        raise ValueError(f"c_bar ({c_bar}) must not exceed rho_bar ({rho_bar})")
    ratios = torch.exp(target_log_probs - behaviour_log_probs)
    rhos = torch.clamp(ratios, max=rho_bar)
    cs = torch.clamp(ratios, max=c_bar)
    next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = rhos * (rewards + discounts * next_values - values)

    # weights[s, t] = Π_{i=s}^{t-1} γ_i c_i for t >= s, else 0: a cumulative product along t
    # of factors that are γ_{t-1} c_{t-1} past the diagonal and 1 up to it.
    steps = shape[0]
    decay = discounts * cs  # [T, B]
    later = torch.ones(steps, steps, dtype=torch.bool, device=values.device).triu(1)  # t > s
    previous = torch.cat([torch.ones_like(decay[:1]), decay[:-1]], dim=0)  # γ_{t-1} c_{t-1}
    factors = torch.where(later.unsqueeze(-1), previous.unsqueeze(0), torch.ones_like(decay))
    weights = torch.cumprod(factors, dim=1) * later.logical_or(
        torch.eye(steps, dtype=torch.bool, device=values.device)
    ).unsqueeze(-1)
    vs = values + torch.einsum("stb,tb->sb", weights, deltas)

    next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_rhos = torch.clamp(ratios, max=rho_bar if pg_rho_bar is None else pg_rho_bar)
    pg_advantages = pg_rhos * (rewards + discounts * next_vs - values)
    return VTraceTargets(vs=vs, pg_advantages=pg_advantages)
