"""The learning step: double DQN on n-step transitions with importance weights.

For a sampled transition ``(s, a, R, d, s')`` (``d`` is ``γ^n``, or 0 past a terminal state):

    a*  = argmax_a' Q_online(s', a')                 (double DQN: online net picks)
    y   = R + d · Q_target(s', a*)                   (target net evaluates)
    δ   = y − Q_online(s, a)
    L   = mean_i  w_i · huber(δ_i)                   (w: prioritized-replay weights)

Gradients are clipped to a global norm, and the new priorities are ``|δ| + ε``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class StepResult:
    loss: float
    mean_abs_td: float
    new_priorities: torch.Tensor  # |δ| + ε, on the CPU, float64


def dqn_step(
    online: nn.Module,
    target: nn.Module,
    optimizer: torch.optim.Optimizer,
    transitions: dict[str, torch.Tensor],
    weights: torch.Tensor,
    max_grad_norm: float,
    priority_epsilon: float,
) -> StepResult:
    """One gradient step on one batch; returns the loss and the new priorities."""
    observations = transitions["obs"]
    actions = transitions["action"].long().unsqueeze(1)
    q_taken = online(observations).gather(1, actions).squeeze(1)
    with torch.no_grad():
        next_observations = transitions["next_obs"]
        best_next = online(next_observations).argmax(dim=1, keepdim=True)
        next_value = target(next_observations).gather(1, best_next).squeeze(1)
        targets = transitions["reward"] + transitions["discount"] * next_value
    td = targets - q_taken
    loss = (weights * nn.functional.huber_loss(q_taken, targets, reduction="none")).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(online.parameters(), max_grad_norm)
    optimizer.step()
    magnitude = td.detach().abs()
    return StepResult(
        loss=float(loss.detach()),
        mean_abs_td=float(magnitude.mean()),
        new_priorities=(magnitude + priority_epsilon).double().cpu(),
    )
