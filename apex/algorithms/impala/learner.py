"""IMPALA (Espeholt et al. 2018): an actor-critic learning from queued unrolls with V-trace.

For a batch of unrolls made by behaviour policies μ (the actors' copies, some versions
old) and learned on by π (the learner's network), with the V-trace targets ``v_s`` and
advantages ``A_s = ρ^pg_s (r_s + γ_s v_{s+1} − V(x_s))`` of :mod:`apex.algorithms.impala.vtrace`:

    L = − mean_{s,b} A_s log π(a_s|x_s)                      (policy gradient)
        + baseline_cost · ½ mean_{s,b} (v_s − V(x_s))²        (value regression)
        − entropy_cost · mean_{s,b} H(π(·|x_s))                (exploration)

Means over time and batch keep the loss's scale, and so the learning rate and the
gradient clipping, independent of the unroll length and the batch. With
``correction = false`` the importance weights are fixed at 1 (ρ = c = 1): the ablation
the IMPALA paper compares against, learning as if every unroll were on-policy.

:class:`Impala` is the learner's algorithm object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from apex.algorithms.impala.settings import ImpalaSettings

if TYPE_CHECKING:
    import torch
    from torch import nn

    from apex.algorithms.optimizer import Adam
    from apex.algorithms.updates import StepResult
    from apex.learning.staging import DeviceBatch
    from apex.settings import LearnerConfig


@dataclass(frozen=True)
class LossParts:
    """One batch's loss and what it is made of (plain floats, for the metrics)."""

    loss: float
    policy_loss: float
    baseline_loss: float
    entropy: float
    mean_abs_advantage: float
    mean_rho: float


def impala_loss(
    network: nn.Module, unrolls: dict[str, torch.Tensor], settings: ImpalaSettings
) -> tuple[torch.Tensor, LossParts]:
    """The IMPALA loss of a batch of unrolls (batch-major fields: ``obs`` ``[B, T+1, ...]``,
    ``action``, ``reward``, ``discount`` and ``log_prob`` ``[B, T]``)."""
    import torch

    from apex.algorithms.impala.vtrace import vtrace_targets

    observations = unrolls["obs"]
    batch, steps = observations.shape[0], observations.shape[1] - 1
    logits, values = network(observations.reshape(batch * (steps + 1), *observations.shape[2:]))
    logits = logits.reshape(batch, steps + 1, -1).transpose(0, 1)  # time-major
    values = values.reshape(batch, steps + 1).transpose(0, 1)
    log_policy = torch.log_softmax(logits[:-1], dim=-1)  # [T, B, A]
    actions = unrolls["action"].long().transpose(0, 1)
    target_log_probs = log_policy.gather(2, actions.unsqueeze(2)).squeeze(2)
    behaviour = unrolls["log_prob"].transpose(0, 1).to(target_log_probs.dtype)
    if not settings.correction:
        behaviour = target_log_probs.detach()  # π/μ = 1 everywhere
    targets = vtrace_targets(
        behaviour,
        target_log_probs.detach(),
        unrolls["reward"].transpose(0, 1).to(values.dtype),
        unrolls["discount"].transpose(0, 1).to(values.dtype),
        values[:-1].detach(),
        values[-1].detach(),
        rho_bar=settings.rho_bar,
        c_bar=settings.c_bar,
        pg_rho_bar=settings.pg_rho_bar,
    )
    policy_loss = -(targets.pg_advantages * target_log_probs).mean()
    baseline_loss = 0.5 * (targets.vs - values[:-1]).pow(2).mean()
    entropy = -(log_policy.exp() * log_policy).sum(dim=-1).mean()
    loss = policy_loss + settings.baseline_cost * baseline_loss - settings.entropy_cost * entropy
    with torch.no_grad():
        rho = torch.exp(target_log_probs - behaviour).clamp(max=settings.rho_bar).mean()
    parts = LossParts(
        loss=float(loss.detach()),
        policy_loss=float(policy_loss.detach()),
        baseline_loss=float(baseline_loss.detach()),
        entropy=float(entropy.detach()),
        mean_abs_advantage=float(targets.pg_advantages.abs().mean()),
        mean_rho=float(rho),
    )
    return loss, parts


class Impala:
    """The learner's IMPALA: one network, Adam, V-trace targets.

    Args:
        config: the learner's settings (widths, optimizer, clipping).
        settings: its ``[impala]`` section.
        observation_shape: one observation's shape.
        actions: the number of discrete actions.
        device: where the network lives.
    """

    variant = "IMPALA"

    def __init__(
        self,
        config: LearnerConfig,
        settings: ImpalaSettings,
        observation_shape: tuple[int, ...],
        actions: int,
        device: torch.device,
        network: nn.Module | None = None,
    ) -> None:
        from apex.algorithms.networks import PolicyValueNet
        from apex.algorithms.updates import adam

        self.config = config
        self.settings = settings
        if network is None:
            network = PolicyValueNet(observation_shape, actions, config.hidden)
        self.network = network.to(device)
        self.optimizer = adam(self.network.parameters(), config.learning_rate, config.adam_epsilon)
        self.steps = 0
        self.last: LossParts | None = None

    @property
    def optimizers(self) -> list[Adam]:
        return [self.optimizer]

    @property
    def policy(self) -> nn.Module:
        return self.network

    def step(self, batch: DeviceBatch) -> StepResult:
        """One update on a batch of unrolls (no priorities come back: a queue has none)."""
        from apex.algorithms.updates import StepResult, descend

        loss, parts = impala_loss(self.network, batch.transitions, self.settings)
        skipped = descend(
            self.optimizer, loss, self.network.parameters(), self.config.max_grad_norm
        )
        self.steps += 1
        self.last = parts
        return StepResult(parts.loss, parts.mean_abs_advantage, None, bool(skipped))

    def state_dict(self) -> dict:
        import torch

        return {
            "network": self.network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "steps": torch.tensor(self.steps),
        }

    def load_state_dict(self, state: dict) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state.get("steps", 0))
