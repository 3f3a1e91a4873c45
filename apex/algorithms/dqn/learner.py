"""The learning step: double DQN on n-step transitions with importance weights.

For a sampled transition ``(s, a, R, d, s')`` (``d`` is ``γ^n``, or 0 past a terminal state):

    a*  = argmax_a' Q_online(s', a')                 (double DQN: online net picks)
    y   = R + d · Q_target(s', a*)                   (target net evaluates)
    δ   = y − Q_online(s, a)
    L   = mean_i  w_i · huber_κ(δ_i)                 (w: prioritized-replay weights)

Gradients are clipped to a global norm, and the new priorities are ``|δ| + ε``.

:class:`DoubleDQN` is the algorithm object the learner loop drives: it owns the online and
target networks and the optimizer, and its :meth:`DoubleDQN.step` takes a batch and returns
the new priorities. :class:`DQNActing` is an actor's side: ε-greedy on its copy of the
Q-network, and Ape-X's initial priorities ``|R + d · max_a Q(s', a) − Q(s, a)|``. The module
is DQN's entry in ``apex.algorithms.registry.ALGORITHMS``; torch is imported where a network is
built or trained, so an actor on vector observations never imports it.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from apex.algorithms.exploration import epsilon_greedy
from apex.algorithms.policy import build_policy
from apex.algorithms.updates import StepResult, adam, descend, soft_update
from replay.store.field_checks import (
    checked,
    in_unit_interval,
    not_negative,
    not_positive_integers,
    positive_or_none,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from apex.algorithms.optimizer import Adam
    from apex.envs.families import EnvShape
    from apex.learning.staging import DeviceBatch
    from apex.settings import ActorConfig, LearnerConfig


# The batch fields the update reads (the rest route priorities or count the lag).
GRAPH_FIELDS = ("obs", "action", "reward", "discount", "next_obs")


@dataclass(frozen=True)
class Settings:
    """The run config's ``[learner.dqn]``.

    Attributes:
        target_update_period: updates between copies of the online network to the target.
        policy_average: 0, or the Polyak rate of an average of the online network that
            actors act with and evaluation plays (``average ← (1 − rate)·average +
            rate·online`` after each update): it smooths the update-to-update noise in
            the greedy actions, not a policy that stays wrong for hundreds of updates.
        average_from_solve: start that average at the run's first confirmed solve, from
            the online network then (a run that trains on past it): until the solve the
            actors act with the online network, so the average does not slow the
            learning that finds the solve.
        restart_at_solve: at the run's first confirmed solve, the online, target and
            averaged networks take the weights the evaluation confirmed, and training
            goes on from them. By the time a 100-episode confirmation is in, the
            learner has gone on past its weights, and early in a run that can be a much
            worse policy (tens of updates on). The learner keeps its newest publications'
            weights for it
            (``apex.learning.learner.CONFIRMED_WEIGHTS_KEPT_BYTES``); when the confirmed version
            is no longer among them, training goes on as it was.
        anchor_margin: 0, or from the run's first confirmed solve on, a large-margin loss
            (DQfD's, Hester et al. 2018) holds the online network's greedy actions on the
            sampled states to the confirmed policy's: ``max_a [Q(s, a) + m·[a ≠ a_c]] −
            Q(s, a_c)``, with ``a_c`` the confirmed network's greedy action and ``m`` this
            margin. TD learning goes on beside it; an early solve's greedy choices sit on
            action gaps so small that a few hundred updates of it alone lose them.
        anchor_weight: the margin loss's weight beside the TD loss.
        follow_better_confirmations: after the first confirmed solve, the evaluator
            confirms each periodic evaluation above the best confirmed mean so far, and
            a confirmation that beats it takes the first one's place as the anchor.
            Training goes on from where it is: the restart is the first solve's alone,
            where it undoes the updates made while the confirmation ran; later, the
            anchor already holds the greedy actions. A marginal first solve (just over
            the target) otherwise holds the policy near its own mean for the rest of the
            run.
        follow_margin: by how much a periodic evaluation must beat the best confirmed
            mean to be confirmed (``follow_better_confirmations``). A 20-episode mean
            beats a 100-episode one by chance once the policy is near it, and each
            confirmation plays 100 episodes on the run's cores.
        back_to_anchor: once settled, a periodic evaluation under the target puts the
            anchor's weights back into the online, target and averaged networks (PBT's
            exploit step, a population of one). The margin loss holds greedy actions only
            on replay's states, and a good policy's replay holds few near a fall, so even
            a settled run can drift. Only a settled anchor is gone back to: a marginal
            one would send training back again and again.
        huber_delta: the Huber loss's κ, where its gradient stops growing with ``|δ|``
            (Acme's ``huber_loss_parameter``). The Nature DQN's 1 suits rewards clipped
            to ±1; where returns reach the hundreds, a failure's error of 50 then moves
            the network no more than an error of 1.
    """

    target_update_period: int = 2500
    policy_average: float = 0.0
    average_from_solve: bool = False
    restart_at_solve: bool = False
    anchor_margin: float = 0.0
    anchor_weight: float = 1.0
    huber_delta: float = 1.0
    follow_better_confirmations: bool = False
    follow_margin: float = 0.0
    back_to_anchor: bool = False

    @property
    def confirms_improvements(self) -> bool:
        """Whether better confirmations are asked for: only where a solve anchors
        training (``launch.builder.evaluator`` reads it)."""
        return self.follow_better_confirmations and self.anchor_margin > 0

    def problems(self, prefix: str = "learner.dqn.") -> list[str]:
        return checked(self, prefix, lambda: not_positive_integers(
            {f"{prefix}target_update_period": self.target_update_period})
            + in_unit_interval(f"{prefix}policy_average", self.policy_average)
            + positive_or_none({f"{prefix}huber_delta": self.huber_delta})
            + not_negative({f"{prefix}anchor_margin": self.anchor_margin,
                            f"{prefix}anchor_weight": self.anchor_weight,
                            f"{prefix}follow_margin": self.follow_margin}))  # fmt: skip


def shape_problems(shape: EnvShape, env: str) -> list[str]:
    """DQN takes any observations its networks do (vectors, stacked image frames)."""
    return []


def build_learner(
    config: LearnerConfig, settings: Settings, shape: EnvShape, device: torch.device
) -> DoubleDQN:
    return DoubleDQN(config, settings, shape.observation_shape, shape.actions, device)


def build_acting(config: ActorConfig, shape: EnvShape) -> DQNActing:
    return DQNActing(config, shape)


def dqn_step(
    online: nn.Module,
    target: nn.Module,
    optimizer: Adam,
    transitions: dict[str, torch.Tensor],
    weights: torch.Tensor,
    max_grad_norm: float,
    priority_epsilon: float,
    anchor: Anchor | None = None,
    huber_delta: float = 1.0,
) -> StepResult:
    """One gradient step on one batch; returns the loss and the new priorities."""
    loss, magnitude = dqn_loss(online, target, transitions, weights, anchor, huber_delta)
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
    anchor: Anchor | None = None,
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
    if anchor is not None:
        loss = loss + anchor.weight * anchor.margin_loss(observations, q_all)
    return loss, td.detach().abs()


@dataclass(frozen=True)
class Anchor:
    """The confirmed policy's network, and its large-margin loss (``Settings.anchor_margin``)."""

    network: nn.Module
    margin: float
    weight: float

    def margin_loss(self, observations: torch.Tensor, q_all: torch.Tensor) -> torch.Tensor:
        import torch

        with torch.no_grad():
            confirmed = self.network(observations).argmax(dim=1, keepdim=True)
        margins = torch.full_like(q_all, self.margin).scatter_(1, confirmed, 0.0)
        held = q_all.gather(1, confirmed).squeeze(1)
        return ((q_all + margins).max(dim=1).values - held).mean()


class DoubleDQN:
    """Double DQN with dueling heads, n-step targets and a periodic target copy.

    Args:
        config: the learner's settings (network widths, optimizer, clipping, periods).
        settings: its ``[learner.dqn]`` section.
        observation_shape: one observation's shape (a vector, or stacked image frames).
        actions: the number of discrete actions.
        device: where the networks live.
    """

    def __init__(
        self,
        config: LearnerConfig,
        settings: Settings,
        observation_shape: tuple[int, ...],
        actions: int,
        device: torch.device,
    ) -> None:
        import torch

        from apex.algorithms.networks import build_network

        self.config = config
        self.settings = settings
        self.online = build_network(observation_shape, actions, config.hidden).to(device)
        self.target = copy.deepcopy(self.online)
        self.target.requires_grad_(False)
        self.average = None
        self.anchor: Anchor | None = None
        if settings.policy_average and not settings.average_from_solve:
            self._start_average()
        self.optimizer = adam(self.online.parameters(), config.learning_rate, config.adam_epsilon)
        self.steps = 0
        self.graphed = None
        if config.cuda_graph and torch.device(device).type == "cuda":
            from apex.algorithms.dqn.graphed_step import GraphedUpdate

            self.graphed = GraphedUpdate(self._update, self.optimizer, config.priority_epsilon)

    def _start_average(self) -> None:
        self.average = copy.deepcopy(self.online)
        self.average.requires_grad_(False)

    def _start_anchor(self, weights: dict[str, torch.Tensor] | None) -> None:
        network = copy.deepcopy(self.policy)
        if weights is not None:
            network.load_state_dict(weights)
        network.requires_grad_(False)
        self.anchor = Anchor(network, self.settings.anchor_margin, self.settings.anchor_weight)

    @property
    def keeps_confirmed_weights(self) -> bool:
        return self.settings.restart_at_solve or self.settings.anchor_margin > 0

    @property
    def follows_better_confirmations(self) -> bool:
        return self.settings.confirms_improvements

    def solved(self, confirmed: dict[str, torch.Tensor] | None = None) -> None:
        """What waits for the solve: training goes on from the ``confirmed`` weights (if
        it restarts there), held to their greedy actions (if anchored; without them, to
        the policy's now), and the averaged policy starts. Again with a better
        confirmation's weights: the anchor moves to them, and training goes on."""
        first_solve = self.anchor is None  # a resumed solved run has its anchor back
        if confirmed is not None and self.settings.restart_at_solve and first_solve:
            self._train_from(confirmed)
        if self.settings.anchor_margin and (self.anchor is None or confirmed is not None):
            self._start_anchor(confirmed)
        if self.settings.policy_average and self.average is None:
            self._start_average()

    def back_to_anchor(self) -> bool:
        """The anchor's weights back in every network (``back_to_anchor``); whether."""
        if not self.settings.back_to_anchor or self.anchor is None:
            return False
        self._train_from(self.anchor.network.state_dict())
        return True

    def _train_from(self, weights: dict[str, torch.Tensor]) -> None:
        for network in (self.online, self.target, self.average):
            if network is not None:
                network.load_state_dict(weights)

    @property
    def optimizers(self) -> list[Adam]:
        return [self.optimizer]

    @property
    def policy(self) -> nn.Module:
        """The network actors act with and evaluation runs: the online one, or its average
        (``Settings.policy_average``)."""
        return self.online if self.average is None else self.average

    def step(self, batch: DeviceBatch) -> StepResult:
        """One update on ``batch``; copies the online network to the target every
        ``target_update_period`` steps."""
        replayed = None
        if self.graphed is not None and self.anchor is None:  # the anchor's loss: eager
            inputs = {name: batch.transitions[name] for name in GRAPH_FIELDS}
            replayed = self.graphed({**inputs, "weights": batch.weights})
        if replayed is not None:
            result = StepResult(*replayed)
        else:
            where = self.graphed.eager_stream() if self.graphed else contextlib.nullcontext()
            with where:
                result = dqn_step(self.online, self.target, self.optimizer, batch.transitions,
                                  batch.weights, self.config.max_grad_norm,
                                  self.config.priority_epsilon, self.anchor,
                                  self.settings.huber_delta)  # fmt: skip
        self.steps += 1
        if self.steps % self.settings.target_update_period == 0:
            self.target.load_state_dict(self.online.state_dict())
        if self.average is not None:
            soft_update(self.average, self.online, self.settings.policy_average)
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

    def state_dict(self) -> dict:
        import torch

        state = {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "steps": torch.tensor(self.steps),
        }
        if self.average is not None:
            state["average"] = self.average.state_dict()
        if self.anchor is not None:
            state["anchor"] = self.anchor.network.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        if "average" in state and self.settings.policy_average and self.average is None:
            self._start_average()  # it had started (at a solve) in the checkpointed life
        if self.average is not None:
            # A checkpoint from a run without the average starts it from the online net.
            self.average.load_state_dict(state.get("average", state["online"]))
        if "anchor" in state and self.settings.anchor_margin:
            self._start_anchor(state["anchor"])
        self.optimizer.load_state_dict(state["optimizer"])
        if "steps" in state:
            self.steps = int(state["steps"])


class DQNActing:
    """An actor's DQN: its copy of the Q-network (numpy for vector observations, torch's
    Nature CNN for images, ``apex.algorithms.policy``), acting ε-greedily."""

    def __init__(self, config: ActorConfig, shape: EnvShape) -> None:
        self.network = build_policy(
            shape.observation_shape, shape.actions, config.hidden, seed=config.actor_seed,
            torch_threads=config.torch_threads, precision=config.acting_precision,
            requantize_every=config.weight_refresh_steps,
        )  # fmt: skip
        self._actions = shape.actions

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.network.parameter_shapes()

    def load(self, arrays) -> None:
        self.network.load(arrays)

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        return self.explore_from(self.values(observations), scales, rng)

    def values(self, observations: np.ndarray) -> np.ndarray:
        """Q(s, ·) per row: what it acts on, and what its priorities reuse
        (``apex.acting.experience``)."""
        return self.network.q_values(observations)

    def explore_from(self, values: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        return epsilon_greedy(values.argmax(axis=1), scales, self._actions, rng)

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return self.td_errors_from(self.values(batch["obs"]), self.values(batch["next_obs"]), batch)

    def td_errors_from(
        self, values: np.ndarray, next_values: np.ndarray, batch: dict[str, np.ndarray]
    ) -> np.ndarray:
        """|R + d · max Q(s') − Q(s, a)| from Q(s, ·) and Q(s', ·) per transition."""
        taken = values[np.arange(len(values)), batch["action"]]
        bootstrap = next_values.max(axis=1)
        return np.abs(batch["reward"] + batch["discount"] * bootstrap - taken).astype(np.float64)
