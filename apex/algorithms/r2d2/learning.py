"""R2D2's update (Kapturowski et al. 2019): double Q-learning with n-step targets on stored
sequences, from their stored recurrent states, after a burn-in that trains nothing.

For a batch of sequences (``apex.algorithms.r2d2.sequences``) of ``m`` steps:

- **burn-in**: the online and the target network each run the first ``l`` steps from the
  stored state without gradient; the loss covers steps ``l .. m − 1``. A sequence that
  starts its episode has the exact initial state, and no burn-in: its loss covers every
  step (an episode's first ``l`` steps would otherwise never train). Both kinds share
  each network's passes: the rows differ only in their masks and where gradient flows.
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
) -> BatchTD:
    """``δ`` of every step of a batch of sequences (``[B, m]``, with gradient through
    ``Q_online(s_t, a_t)`` only), the steps the loss covers, and the stored-state
    discrepancy after the burn-in.

    A sequence that starts its episode (``starts``, none where absent) has no burn-in: its
    loss covers every real step and its gradient reaches its first ``burn_in`` steps. The
    target network reads a batch in one pass, the online one in two split at ``burn_in``
    (and the starting rows' burn-in again with gradient), so an update costs the same few
    launches whatever its mix of sequences.
    """
    obs, state = sequences["obs"], unpack(sequences["state"])
    batch, steps = sequences["action"].shape
    starts = sequences["starts"] > 0 if "starts" in sequences else None
    # Whether any row trains on its first steps: a read back, so only where a burn-in is.
    any_start = burn_in > 0 and starts is not None and bool(starts.any())
    with torch.no_grad():
        q_target, _ = target(obs, state)  # [B, m + 1, A]: the burn-in carries its state
    if burn_in:  # the state crosses into the loss's steps with gradient on starts only
        q_burnt, state = _burn_in(online, obs[:, :burn_in], state, starts if any_start else None)
        q_rest, _ = online(obs[:, burn_in:], state)
        q_online = torch.cat([q_burnt, q_rest], 1)  # [B, m + 1, A]
    else:
        q_online, _ = online(obs, state)
    mask = sequences["mask"]
    with torch.no_grad():
        chosen = q_online.detach().argmax(2, keepdim=True)
        bootstrap = unrescale(q_target.gather(2, chosen).squeeze(2))  # [B, m + 1]
        reward, discount = sequences["reward"], sequences["discount"]
        real = mask.sum(1, keepdim=True)  # a sequence's real steps: a prefix of its m
        positions = torch.arange(steps, device=obs.device).expand(batch, steps)
        returns = torch.zeros_like(reward)
        carried = torch.ones_like(reward)  # γ over the steps summed so far
        taken = torch.zeros_like(reward)  # steps summed: n_t
        for k in range(n_step):
            index = positions + k
            inside = (index < real).float()
            at = index.clamp(max=steps - 1)
            returns = returns + inside * carried * reward.gather(1, at)
            carried = torch.where(inside > 0, carried * discount.gather(1, at), carried)
            taken = taken + inside
        ahead = (positions + taken).long().clamp(max=steps)
        targets = rescale(returns + carried * bootstrap.gather(1, ahead))
        trained = positions >= burn_in
        if starts is not None:
            trained = trained | starts.unsqueeze(1)
        loss_mask = mask * trained.float()
    q_taken = q_online[:, :steps].gather(2, sequences["action"].long().unsqueeze(2)).squeeze(2)
    discrepancy = measured = None
    if burn_in and "burn_in_state" in sequences:
        discrepancy, measured = stored_state_discrepancy(
            online, sequences, burn_in, q_online[:, burn_in], starts
        )
    return BatchTD((targets - q_taken) * loss_mask, loss_mask, discrepancy, measured)


def _burn_in(online: RecurrentQNetwork, obs: torch.Tensor, state, starts: torch.Tensor | None):
    """The online network over the burn-in's steps, without gradient; where some rows
    start their episode (``starts``), those rows again with gradient, put in their place
    (the rest's burn-in trains nothing, and its backward would be most of the work)."""
    with torch.no_grad():
        q, (h, c) = online(obs, state)
    if starts is None or not torch.is_grad_enabled():
        return q, (h, c)
    rows = torch.nonzero(starts).squeeze(1)
    q_rows, (h_rows, c_rows) = online(obs[rows], (state[0][rows], state[1][rows]))
    return q.index_put((rows,), q_rows), (
        h.index_put((rows,), h_rows),
        c.index_put((rows,), c_rows),
    )


def stored_state_discrepancy(
    online: RecurrentQNetwork,
    sequences: dict[str, torch.Tensor],
    burn_in: int,
    burnt_q: torch.Tensor,
    starts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """R2D2's ΔQ at the first step after the burn-in, ``‖Q(s_l; ĥ_l) − Q(s_l; h_l)‖₂ /
    |max_a Q(s_l; h_l)|``, per sequence, and where it is measured (1.0: a sequence with a
    burn-in that reaches step ``l``; its ΔQ is 0 elsewhere): ``ĥ_l`` the state the burn-in
    from the stored state gives with the learner's weights (``burnt_q`` its Q-values),
    ``h_l`` the one the actor had there along the episode. How far the stored state and its
    burn-in leave the learner from the state the policy acted in."""
    measured = sequences["mask"][:, burn_in] > 0
    if starts is not None:
        measured = measured & ~starts
    with torch.no_grad():
        step = sequences["obs"][:, burn_in : burn_in + 1]
        acted, _ = online(step, unpack(sequences["burn_in_state"]))
        acted = acted[:, 0]
        gap = (burnt_q.detach() - acted).norm(dim=1)
        ratio = gap / acted.abs().amax(dim=1).clamp(min=1e-6)
        return ratio * measured, measured.float()


@dataclass
class BatchTD:
    """A batch's TD errors ``δ`` (``[B, m]``, 0 where the loss does not reach), the steps
    the loss covers (1.0), and each sequence's stored-state discrepancy and where it was
    measured (both ``[B]``; None without a burn-in)."""

    delta: torch.Tensor
    mask: torch.Tensor
    discrepancy: torch.Tensor | None
    measured: torch.Tensor | None


def batch_td(
    online: RecurrentQNetwork,
    target: RecurrentQNetwork,
    sequences: dict[str, torch.Tensor],
    settings: R2D2Settings,
) -> BatchTD:
    """:func:`sequence_td` of a batch with ``settings``' burn-in and n."""
    return sequence_td(online, target, sequences, settings.burn_in, settings.n_step)


class R2D2(OnlineAndTarget):
    """The learner's R2D2: a recurrent online network, its target copy, Adam.

    Args:
        config: the learner's settings (widths, optimizer, clipping).
        settings: its ``[r2d2]`` section.
        network: the online network (its copy becomes the target).
        device: where the networks live.
    """

    variant = "R2D2"

    def __init__(
        self,
        config: LearnerConfig,
        settings: R2D2Settings,
        network: RecurrentQNetwork,
        device: torch.device,
    ) -> None:
        self.config, self.settings = config, settings
        self.online = network.to(device)
        self.target = copy.deepcopy(self.online)
        # A copy's LSTM weights are separate tensors; cuDNN wants them in one block, and
        # would otherwise compact them again on every call.
        self.target.lstm.flatten_parameters()
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
        delta, mask = found.delta, found.mask
        per_sequence = batch.weights * (0.5 * delta.square()).sum(1) / mask.sum(1).clamp(min=1)
        loss = per_sequence.mean()
        skipped = descend(self.optimizer, loss, self.online.parameters(), self.config.max_grad_norm)
        self.steps += 1
        if self.steps % settings.target_update_period == 0:
            self.target.load_state_dict(self.online.state_dict())
        with torch.no_grad():
            priorities = sequence_priorities(delta.abs(), mask, settings.eta).double()
            measured = found.measured if found.measured is not None else torch.zeros_like(loss)
            dq = found.discrepancy if found.discrepancy is not None else torch.zeros_like(loss)
            sums = torch.stack(
                [loss.detach(), delta.abs().sum(), mask.sum(), skipped, dq.sum(), measured.sum()]
            ).double()
            # One read back of all the host needs, priorities and figures together.
            read = torch.cat([priorities + self.config.priority_epsilon, sums]).cpu()
        priorities, (loss_value, td_sum, steps, skip, dq_sum, dq_count) = read[:-6], read[-6:]
        extras = {"stored_state_dq": float(dq_sum / dq_count)} if dq_count > 0 else {}
        return StepResult(
            float(loss_value),
            float(td_sum / max(float(steps), 1.0)),
            priorities,
            bool(skip > 0),
            extras,
        )
