"""V-trace targets against a direct loop over the paper's definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from apex.algorithms.impala.vtrace import vtrace_targets


def _reference(behaviour, target, rewards, discounts, values, bootstrap, rho_bar, c_bar):
    """The IMPALA paper's v_s, term by term: V(x_s) + Σ_t (Π_{i<t} γ_i c_i) δ_t, and the
    policy gradient advantage ρ_s (r_s + γ_s v_{s+1} − V(x_s)), in float64 loops."""
    steps, batch = values.shape
    ratios = np.exp(target - behaviour)
    vs = np.zeros((steps, batch))
    advantages = np.zeros((steps, batch))
    for b in range(batch):
        column = np.append(values[:, b], bootstrap[b])  # V(x_0) ... V(x_T)
        for s in range(steps):
            total = values[s, b]
            for t in range(s, steps):
                trace = 1.0
                for i in range(s, t):
                    trace *= discounts[i, b] * min(c_bar, ratios[i, b])
                rho = min(rho_bar, ratios[t, b])
                delta = rho * (rewards[t, b] + discounts[t, b] * column[t + 1] - values[t, b])
                total += trace * delta
            vs[s, b] = total
        for s in range(steps):
            next_v = vs[s + 1, b] if s + 1 < steps else bootstrap[b]
            rho = min(rho_bar, ratios[s, b])
            advantages[s, b] = rho * (rewards[s, b] + discounts[s, b] * next_v - values[s, b])
    return vs, advantages


def _unrolls(rng: np.random.Generator, steps: int, batch: int, ends: float = 0.1):
    behaviour = np.log(rng.uniform(0.05, 1.0, (steps, batch)))
    target = behaviour + rng.normal(0.0, 0.7, (steps, batch))
    rewards = rng.normal(0.0, 1.0, (steps, batch))
    discounts = 0.99 * (rng.uniform(size=(steps, batch)) > ends)
    values = rng.normal(0.0, 2.0, (steps, batch))
    bootstrap = rng.normal(0.0, 2.0, batch)
    return behaviour, target, rewards, discounts, values, bootstrap


def _torch(arrays, dtype=torch.float64):
    return [torch.as_tensor(a, dtype=dtype) for a in arrays]


@pytest.mark.parametrize("rho_bar, c_bar", [(1.0, 1.0), (2.0, 0.5), (math.inf, math.inf)])
@pytest.mark.parametrize("steps, batch", [(1, 3), (7, 5), (20, 4)])
def test_vtrace_equals_the_papers_sum_on_random_unrolls(rho_bar, c_bar, steps, batch):
    rng = np.random.default_rng(steps * 100 + batch)
    arrays = _unrolls(rng, steps, batch)
    expected_vs, expected_advantages = _reference(*arrays, rho_bar, c_bar)
    got = vtrace_targets(*_torch(arrays), rho_bar=rho_bar, c_bar=c_bar)
    np.testing.assert_allclose(got.vs.numpy(), expected_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        got.pg_advantages.numpy(), expected_advantages, rtol=1e-10, atol=1e-10
    )


def test_on_policy_vtrace_is_the_n_step_bootstrapped_return():
    # π = μ: every ρ and c is 1, and v_s is the discounted return to the unroll's end,
    # bootstrapped from V(x_T), cut where an episode ended.
    rng = np.random.default_rng(3)
    behaviour, _, rewards, discounts, values, bootstrap = _unrolls(rng, 20, 6, ends=0.15)
    got = vtrace_targets(*_torch([behaviour, behaviour, rewards, discounts, values, bootstrap]))
    returns = np.zeros_like(values)
    following = bootstrap.copy()
    for t in reversed(range(20)):
        following = rewards[t] + discounts[t] * following
        returns[t] = following
    np.testing.assert_allclose(got.vs.numpy(), returns, rtol=1e-10, atol=1e-10)
    # The advantage is then the one-step TD error on the returns.
    next_returns = np.concatenate([returns[1:], bootstrap[None]], axis=0)
    np.testing.assert_allclose(
        got.pg_advantages.numpy(), rewards + discounts * next_returns - values, atol=1e-10
    )


def test_a_zero_trace_cuts_the_sum_exactly_in_float32():
    # A trace of zero (μ far more likely than π) must stop the sum, not leak through a
    # logarithm as a tiny value or a NaN.
    rng = np.random.default_rng(5)
    arrays = list(_unrolls(rng, 10, 3, ends=0.0))
    arrays[1][4] = arrays[0][4] - 200.0  # π/μ = e^-200: 0 in float32
    got = vtrace_targets(*_torch(arrays, torch.float32))
    assert torch.isfinite(got.vs).all() and torch.isfinite(got.pg_advantages).all()
    expected, _ = _reference(*arrays, 1.0, 1.0)
    np.testing.assert_allclose(got.vs.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_the_targets_carry_no_gradient_and_bad_shapes_are_named():
    rng = np.random.default_rng(7)
    arrays = _torch(_unrolls(rng, 5, 2))
    arrays[4].requires_grad_(True)
    got = vtrace_targets(*arrays)
    assert not got.vs.requires_grad and not got.pg_advantages.requires_grad
    with pytest.raises(ValueError, match="rewards has shape"):
        vtrace_targets(arrays[0], arrays[1], arrays[2][:4], *arrays[3:])
    with pytest.raises(ValueError, match="bootstrap_value has shape"):
        vtrace_targets(*arrays[:5], arrays[5][:1])
    with pytest.raises(ValueError, match="must not exceed"):
        vtrace_targets(*arrays, rho_bar=1.0, c_bar=2.0)
