"""What every algorithm's update shares: its result, the clipped gradient step, the
optimizer, soft target updates and the step size a schedule sets. Every algorithm of
``apex.algorithms.registry.ALGORITHMS`` builds on these; none imports another's module for
them.
torch is imported where each is called, so importing this module costs an actor nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

    from apex.algorithms.optimizer import Adam


@dataclass(frozen=True)
class StepResult:
    """What one update gives back.

    Attributes:
        loss: the weighted loss of the batch.
        mean_abs_td: mean ``|δ|`` over the batch.
        new_priorities: ``|δ| + ε`` per item, on the CPU, float64; None for an algorithm
            whose replay has no priorities (IMPALA's queue).
        skipped: the loss or a gradient was not finite, so no parameter changed
            (:func:`descend`); the learner then sends no priorities and counts it.
        extras: an algorithm's own figures of the update, by name; each progress record
            carries their mean over its window (R2D2's stored-state discrepancy).
    """

    loss: float
    mean_abs_td: float
    new_priorities: torch.Tensor | None
    skipped: bool = False
    extras: dict[str, float] = field(default_factory=dict)


def descend(optimizer: Adam, loss: torch.Tensor, parameters, max_norm: float) -> torch.Tensor:
    """One gradient step on ``loss``: gradients of ``parameters`` clipped to a global norm
    of ``max_norm`` (every algorithm's update ends so).

    A loss or a gradient that is not finite (a NaN or an infinity anywhere in the batch
    reaches both) skips the step: the parameters and Adam's moments stay as they were,
    so nothing non-finite is ever published. Decided on the device, without a read back
    to the host (a CUDA graph records it too).

    Returns:
        A float scalar on the device: 1 where the step was skipped, else 0.
    """
    import torch
    from torch import nn

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(parameters, max_norm)
    skipped = torch.logical_not(torch.isfinite(norm + loss.detach())).float()
    optimizer.step(found_inf=skipped)
    return skipped


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target ← (1 − tau)·target + tau·online``, parameter by parameter (DPG's target
    networks)."""
    import torch

    with torch.no_grad():
        for kept, new in zip(target.parameters(), online.parameters(), strict=True):
            kept.lerp_(new, tau)


class OnlineAndTarget:
    """The checkpoint state of a learner with an online network, its target copy, one
    optimizer and a count of its updates (DQN's, R2D2's)."""

    online: nn.Module
    target: nn.Module
    optimizer: Adam
    steps: int

    def state_dict(self) -> dict:
        import torch

        return {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "steps": torch.tensor(self.steps),
        }

    def load_state_dict(self, state: dict) -> None:
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        if "steps" in state:
            self.steps = int(state["steps"])


def adam(parameters, learning_rate: float, epsilon: float) -> Adam:
    """Every algorithm's optimizer: Adam's fused kernel, without ``torch.optim`` (whose
    first optimizer costs a learner 1.6 s of start, ``apex.algorithms.optimizer``)."""
    from apex.algorithms.optimizer import Adam

    return Adam(parameters, lr=learning_rate, eps=epsilon)


def set_learning_rate(optimizers, rate: float) -> None:
    """Every parameter group of ``optimizers`` at step size ``rate`` (a schedule's)."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = rate
