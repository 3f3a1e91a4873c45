"""R2D2's update (Kapturowski et al. 2019): double Q-learning with n-step targets on stored
sequences, from their stored recurrent states, after a burn-in that trains nothing.

For a batch of sequences (``apex.algorithms.r2d2.sequences``) of ``m`` steps:

- **burn-in**: the online and the target network each run the first ``l`` steps from the
  stored state without gradient; the loss covers steps ``l .. m − 1``. A sequence that
  starts its episode has the exact initial state, and no burn-in: its loss covers every
  step (an episode's first ``l`` steps would otherwise never train).
- **targets**: ``y_t = h(Σ_k γ_{t..t+k} r_{t+k} + γ_{t..t+n_t} h⁻¹(Q_target(s_{t+n_t},
  a*)))`` with ``a* = argmax Q_online(s_{t+n_t})`` (double Q), ``n_t = min(n, steps left
  in the sequence's episode part)``, ``h`` the value rescaling (``targets``); a
  terminated step's γ of 0 ends the sum, a truncated one bootstraps from its final
  observation.
- **loss**: ``½ δ²`` averaged over each sequence's real steps, weighted by its
  importance weight, averaged over the batch; gradients clipped to a global norm.
- **priorities**: ``η max|δ| + (1 − η) mean|δ|`` per sequence, plus ``priority_epsilon``.

The target network is a copy of the online one every ``target_update_period`` updates.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from apex.algorithms.r2d2.network import RecurrentQNetwork, unpack
from apex.algorithms.r2d2.settings import R2D2Settings
from apex.algorithms.r2d2.targets import rescale, sequence_priorities, unrescale
from apex.algorithms.updates import OnlineAndTarget, StepResult, adam, descend

if TYPE_CHECKING:
    from apex.algorithms.optimizer import Adam
    from apex.learning.staging import DeviceBatch
    from apex.settings import LearnerConfig


def sequence_td(
    online: RecurrentQNetwork,
    target: RecurrentQNetwork,
    sequences: dict[str, torch.Tensor],
    burn_in: int,
    n_step: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``δ`` of the steps after ``burn_in`` (``[B, m − burn_in]``, with gradient through
    ``Q_online(s_t, a_t)`` only), their mask (real steps: 1), and after a burn-in each
    sequence's :func:`stored_state_discrepancy` where it reaches step ``burn_in`` (None
    without a burn-in)."""
    obs, state = sequences["obs"], unpack(sequences["state"])
    steps = sequences["action"].shape[1]
    online_state = target_state = state
    if burn_in:
        with torch.no_grad():
            _, online_state = online(obs[:, :burn_in], state)
            _, target_state = target(obs[:, :burn_in], state)
    q_online, _ = online(obs[:, burn_in:], online_state)  # [B, m + 1 − l, A]
    with torch.no_grad():
        q_target, _ = target(obs[:, burn_in:], target_state)
        chosen = q_online.detach().argmax(2, keepdim=True)
        bootstrap = unrescale(q_target.gather(2, chosen).squeeze(2))  # [B, m + 1 − l]
        reward = sequences["reward"][:, burn_in:]
        discount = sequences["discount"][:, burn_in:]
        mask = sequences["mask"][:, burn_in:]
        real = mask.sum(1, keepdim=True)  # the sequence's steps left after the burn-in
        span = steps - burn_in
        positions = torch.arange(span, device=obs.device).expand(len(reward), span)
        returns = torch.zeros_like(reward)
        carried = torch.ones_like(reward)  # γ over the steps summed so far
        taken = torch.zeros_like(reward)  # steps summed: n_t
        for k in range(n_step):
            index = positions + k
            inside = (index < real).float()
            at = index.clamp(max=span - 1)
            returns = returns + inside * carried * reward.gather(1, at)
            carried = torch.where(inside > 0, carried * discount.gather(1, at), carried)
            taken = taken + inside
        ahead = (positions + taken).long().clamp(max=span)
        targets = rescale(returns + carried * bootstrap.gather(1, ahead))
    actions = sequences["action"][:, burn_in:].long().unsqueeze(2)
    q_taken = q_online[:, :span].gather(2, actions).squeeze(2)
    discrepancy = None
    if burn_in and "burn_in_state" in sequences:
        discrepancy = stored_state_discrepancy(online, sequences, burn_in, q_online[:, 0])
    return (targets - q_taken) * mask, mask, discrepancy


def stored_state_discrepancy(
    online: RecurrentQNetwork, sequences: dict[str, torch.Tensor], burn_in: int,
    burnt_q: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """R2D2's ΔQ at the first step after the burn-in, ``‖Q(s_l; ĥ_l) − Q(s_l; h_l)‖₂ /
    |max_a Q(s_l; h_l)|``, for the sequences that reach step ``l``: ``ĥ_l`` the state the
    burn-in from the stored state gives with the learner's weights (``burnt_q`` its
    Q-values), ``h_l`` the one the actor had there along the episode. How far the stored
    state and its burn-in leave the learner from the state the policy acted in."""
    reached = sequences["mask"][:, burn_in] > 0
    with torch.no_grad():
        step = sequences["obs"][reached, burn_in : burn_in + 1]
        acted, _ = online(step, unpack(sequences["burn_in_state"][reached]))
        acted = acted[:, 0]
        gap = (burnt_q.detach()[reached] - acted).norm(dim=1)
        return gap / acted.abs().amax(dim=1).clamp(min=1e-6)


@dataclass
class BatchTD:
    """A batch's TD errors: the batch rows of each part in order (episode starts, then the
    rest), each part's ``δ`` and mask, and the burnt-in part's stored-state discrepancy
    per sequence (None: no sequence was burnt in to a real step)."""

    order: torch.Tensor
    deltas: list[torch.Tensor]
    masks: list[torch.Tensor]
    discrepancy: torch.Tensor | None


def batch_td(
    online: RecurrentQNetwork,
    target: RecurrentQNetwork,
    sequences: dict[str, torch.Tensor],
    settings: R2D2Settings,
) -> BatchTD:
    """:func:`sequence_td` of a batch: sequences that start their episode with no burn-in,
    the others with ``settings.burn_in``."""
    starts = sequences["starts"] > 0
    rows, deltas, masks, discrepancy = [], [], [], None
    for chosen, burn_in in ((starts, 0), (~starts, settings.burn_in)):
        if not bool(chosen.any()):
            continue
        # A batch of one kind is its own part: no copy of its sequences.
        whole = bool(chosen.all())
        part = sequences if whole else {key: value[chosen] for key, value in sequences.items()}
        delta, mask, measured = sequence_td(online, target, part, burn_in, settings.n_step)
        rows.append(torch.nonzero(chosen).squeeze(1))
        deltas.append(delta)
        masks.append(mask)
        if measured is not None:  # only a part with a burn-in measures it
            discrepancy = measured
    return BatchTD(torch.cat(rows), deltas, masks, discrepancy)


def priorities_of(deltas: list[torch.Tensor], masks: list[torch.Tensor], order: torch.Tensor,
                  eta: float) -> torch.Tensor:  # fmt: skip
    """Each sequence's ``η max|δ| + (1 − η) mean|δ|``, float64, in batch order."""
    priorities = torch.empty(len(order), dtype=torch.float64, device=order.device)
    magnitudes = [sequence_priorities(delta.detach().abs(), mask, eta)
                  for delta, mask in zip(deltas, masks, strict=True)]  # fmt: skip
    priorities[order] = torch.cat(magnitudes).double()
    return priorities


class R2D2(OnlineAndTarget):
    """The learner's R2D2: a recurrent online network, its target copy, Adam.

    Args:
        config: the learner's settings (widths, optimizer, clipping).
        settings: its ``[r2d2]`` section.
        network: the online network (its copy becomes the target).
        device: where the networks live.
    """

    variant = "R2D2"

    def __init__(self, config: LearnerConfig, settings: R2D2Settings,
                 network: RecurrentQNetwork, device: torch.device) -> None:  # fmt: skip
        self.config, self.settings = config, settings
        self.online = network.to(device)
        self.target = copy.deepcopy(self.online)
        self.target.requires_grad_(False)
        self.optimizer = adam(self.online.parameters(), config.learning_rate, config.adam_epsilon)
        self.steps = 0

    @property
    def optimizers(self) -> list[Adam]:
        return [self.optimizer]

    @property
    def policy(self) -> RecurrentQNetwork:
        return self.online

    def step(self, batch: DeviceBatch) -> StepResult:
        """One update; a priority per sequence."""
        settings = self.settings
        found = batch_td(self.online, self.target, batch.transitions, settings)
        order, deltas, masks = found.order, found.deltas, found.masks
        weights = batch.weights[order].split([len(delta) for delta in deltas])
        per_sequence = [
            weight * (0.5 * delta.square()).sum(1) / mask.sum(1).clamp(min=1)
            for delta, mask, weight in zip(deltas, masks, weights, strict=True)
        ]
        loss = torch.cat(per_sequence).mean()
        skipped = descend(self.optimizer, loss, self.online.parameters(),
                          self.config.max_grad_norm)  # fmt: skip
        self.steps += 1
        if self.steps % settings.target_update_period == 0:
            self.target.load_state_dict(self.online.state_dict())
        priorities = priorities_of(deltas, masks, order, settings.eta)
        steps = sum(mask.sum() for mask in masks).clamp(min=1)
        td_mean = float(sum(delta.detach().abs().sum() for delta in deltas) / steps)
        priorities = (priorities + self.config.priority_epsilon).cpu()
        extras = {}
        if found.discrepancy is not None and len(found.discrepancy):
            extras["stored_state_dq"] = float(found.discrepancy.mean())
        return StepResult(float(loss.detach()), td_mean, priorities, bool(skipped), extras)
