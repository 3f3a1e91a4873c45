"""The learning step: double DQN on n-step transitions with importance weights.

For a sampled transition ``(s, a, R, d, s')`` (``d`` is ``γ^n``, or 0 past a terminal state):

    a*  = argmax_a' Q_online(s', a')                 (double DQN: online net picks)
    y   = R + d · Q_target(s', a*)                   (target net evaluates)
    δ   = y − Q_online(s, a)
    L   = mean_i  w_i · huber_κ(δ_i)                 (w: prioritized-replay weights)

Gradients are clipped to a global norm, and the new priorities are ``|δ| + ε``.

:class:`DoubleDQN` is the algorithm object the learner loop drives: it owns the online and
target networks and the optimizer, and its :meth:`DoubleDQN.step` takes a batch and returns
the new priorities. torch is imported where a network is built or trained, so an actor on
vector observations never imports it.
"""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING

from apex.algorithms.dqn.settings import DQNSettings
from apex.algorithms.updates import OnlineAndTarget, StepResult, adam, descend

if TYPE_CHECKING:
    import torch
    from torch import nn

    from apex.algorithms.optimizer import Adam
    from apex.learning.staging import DeviceBatch
    from apex.settings import LearnerConfig


# The batch fields the update reads (the rest route priorities or count the lag).
GRAPH_FIELDS = ("obs", "action", "reward", "discount", "next_obs")


def dqn_step(
    online: nn.Module,
    target: nn.Module,
    optimizer: Adam,
    transitions: dict[str, torch.Tensor],
    weights: torch.Tensor,
    max_grad_norm: float,
    priority_epsilon: float,
    huber_delta: float = 1.0,
) -> StepResult:
    """One gradient step on one batch; returns the loss and the new priorities."""
    loss, magnitude = dqn_loss(online, target, transitions, weights, huber_delta)
    skipped = descend(optimizer, loss, online.parameters(), max_grad_norm)
    return StepResult(
        loss=float(loss.detach()),
        mean_abs_td=float(magnitude.mean()),
        new_priorities=(magnitude + priority_epsilon).double().cpu(),
        skipped=bool(skipped),
    )


def dqn_loss(
    online: nn.Module,
    target: nn.Module,
    transitions: dict[str, torch.Tensor],
    weights: torch.Tensor,
    huber_delta: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's weighted loss, and ``|δ|`` per transition (detached); the module
    docstring's formulas. Both the eager step and the CUDA graph's
    (``apex.algorithms.dqn.graphed_step``) compute it here."""
    import torch
    from torch import nn

    observations = transitions["obs"]
    actions = transitions["action"].long().unsqueeze(1)
    q_all = online(observations)
    q_taken = q_all.gather(1, actions).squeeze(1)
    with torch.no_grad():
        next_observations = transitions["next_obs"]
        best_next = online(next_observations).argmax(dim=1, keepdim=True)
        next_value = target(next_observations).gather(1, best_next).squeeze(1)
        targets = transitions["reward"] + transitions["discount"] * next_value
    td = targets - q_taken
    huber = nn.functional.huber_loss(q_taken, targets, reduction="none", delta=huber_delta)
    loss = (weights * huber).mean()
    return loss, td.detach().abs()


class DoubleDQN(OnlineAndTarget):
    """Double DQN with dueling heads, n-step targets and a periodic target copy.

    Args:
        config: the learner's settings (network widths, optimizer, clipping, periods).
        settings: its ``[dqn]`` section.
        observation_shape: one observation's shape (a vector, or stacked image frames).
        actions: the number of discrete actions.
        device: where the networks live.
    """

    variant = "DoubleDQN"

    def __init__(
        self,
        config: LearnerConfig,
        settings: DQNSettings,
        observation_shape: tuple[int, ...],
        actions: int,
        device: torch.device,
        network: nn.Module | None = None,
    ) -> None:
        import torch

        from apex.algorithms.networks import build_network

        self.config = config
        self.settings = settings
        if network is None:
            network = build_network(observation_shape, actions, config.hidden)
        self.online = network.to(device)
        self.target = copy.deepcopy(self.online)
        self.target.requires_grad_(False)
        self.optimizer = adam(self.online.parameters(), config.learning_rate, config.adam_epsilon)
        self.steps = 0
        self.graphed = None
        if settings.cuda_graph and torch.device(device).type == "cuda":
            from apex.algorithms.dqn.graphed_step import GraphedUpdate

            self.graphed = GraphedUpdate(self._update, self.optimizer, config.priority_epsilon)

    @property
    def optimizers(self) -> list[Adam]:
        return [self.optimizer]

    @property
    def policy(self) -> nn.Module:
        """The network actors act with and evaluation runs: the online one."""
        return self.online

    def step(self, batch: DeviceBatch) -> StepResult:
        """One update on ``batch``; copies the online network to the target every
        ``target_update_period`` steps."""
        replayed = None
        if self.graphed is not None:
            inputs = {name: batch.transitions[name] for name in GRAPH_FIELDS}
            replayed = self.graphed({**inputs, "weights": batch.weights})
        if replayed is not None:
            result = StepResult(*replayed)
        else:
            where = self.graphed.eager_stream() if self.graphed else contextlib.nullcontext()
            with where:
                result = dqn_step(
                    self.online,
                    self.target,
                    self.optimizer,
                    batch.transitions,
                    batch.weights,
                    self.config.max_grad_norm,
                    self.config.priority_epsilon,
                    self.settings.huber_delta,
                )
        self.steps += 1
        if self.steps % self.settings.target_update_period == 0:
            self.target.load_state_dict(self.online.state_dict())
        return result

    def _update(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The update a CUDA graph records (``apex.algorithms.dqn.graphed_step``): the eager step's
        arithmetic, without its reads back to the host."""
        loss, magnitude = dqn_loss(
            self.online,
            self.target,
            inputs,
            inputs["weights"],
            huber_delta=self.settings.huber_delta,
        )
        skipped = descend(self.optimizer, loss, self.online.parameters(), self.config.max_grad_norm)
        return loss.detach(), magnitude, skipped
