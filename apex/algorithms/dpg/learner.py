"""The learning step for continuous actions: Ape-X DPG, plain (DDPG, the default, as in the
Ape-X paper) or with TD3's fixes (settings).

For a sampled transition ``(s, a, R, d, s')`` (``d`` is ``γ^n``, or 0 past a terminal state),
with ``π`` the policy, ``Q1, Q2`` twin critics and primes their target copies:

    ã   = clip(π'(s') + clip(ε, −c, c), low, high),  ε ~ N(0, σ²)   (target policy smoothing)
    y   = R + d · min(Q1'(s', ã), Q2'(s', ã))                       (clipped double-Q)
    L_Q = mean_i w_i · [(y − Q1(s, a))² + (y − Q2(s, a))²]          (w: importance weights)
    L_π = −mean_i Q1(s, π(s))                     every ``policy_delay`` critic updates

``σ`` and ``c`` are fractions of half the action range. Targets follow the online networks
by Polyak averaging at rate ``tau`` after each policy update. New priorities are
``|y − Q1(s, a)| + ε``: the TD error of the critic the actors hold a copy of, so the
priorities the learner writes back are the same kind as those the actors start with.

With one critic (``dpg.twin_critics = false``, the default), ``y = R + d · Q1'(s', ã)``
and only ``Q1`` is trained; ``policy_delay = 1`` and ``target_noise = 0`` (the defaults)
make it plain DDPG. ``twin_critics = true``, ``policy_delay = 2`` and ``target_noise =
0.2`` make it TD3 (Fujimoto et al. 2018).

Why DDPG by default: an Ape-X learner is the bottleneck, so what each update achieves
decides how fast a run learns. A TD3 update costs about what a DDPG one does, but TD3
moves the policy on every second update only and learns from a pessimistic target. TD3
is the choice where updates are cheap beside the data (a GPU learner) and a run is long
enough for DDPG's overestimation to bite. (The comparison awaits a record from a clean
tree: bench/RESULTS.md, "Not current".)

torch is imported only where the learner builds or trains.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from apex.algorithms.dpg.settings import DPGSettings
from apex.algorithms.updates import StepResult, adam, descend, soft_update

if TYPE_CHECKING:
    import torch
    from torch import nn

    from apex.algorithms.optimizer import Adam
    from apex.learning.staging import DeviceBatch
    from apex.settings import LearnerConfig


class DPG:
    """Deterministic policy gradient on n-step prioritized batches: DDPG, or with TD3's
    twin critics, target smoothing and delayed policy updates, as ``config`` says.

    Args:
        config: the learner's settings (widths, learning rate, clipping).
        settings: its ``[dpg]`` section (tau, critics, delay, noise).
        observation_size: ``d`` of the ``(d,)`` observations.
        low, high: the action bounds.
        device: where the networks live.
    """

    def __init__(
        self,
        config: LearnerConfig,
        settings: DPGSettings,
        observation_size: int,
        low,
        high,
        device: torch.device,
    ) -> None:
        from apex.algorithms.networks import ActorCritic, Critic

        self.config = config
        self.settings = settings
        self.online = ActorCritic(observation_size, low, high, config.hidden).to(device)
        self.critic2 = Critic(observation_size, len(low), config.hidden).to(device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self.target_critic2 = copy.deepcopy(self.critic2).requires_grad_(False)
        self.critic_optimizer = adam(
            [*self.online.critic.parameters(), *self.critic2.parameters()],
            config.learning_rate,
            config.adam_epsilon,
        )
        self.policy_optimizer = adam(
            self.online.policy.parameters(), config.learning_rate, config.adam_epsilon
        )
        self.steps = 0

    @property
    def variant(self) -> str:
        """``DDPG``, ``TD3``, or the DPG settings in between (for the run's records)."""
        settings = self.settings
        chosen = (
            ("twin critics", settings.twin_critics),
            ("policy delay", settings.policy_delay > 1),
            ("target smoothing", settings.target_noise > 0),
        )
        fixes = [name for name, on in chosen if on]
        return {0: "DDPG", 3: "TD3"}.get(len(fixes), f"DPG ({', '.join(fixes)})")

    @property
    def optimizers(self) -> list[Adam]:
        return [self.critic_optimizer, self.policy_optimizer]

    @property
    def policy(self) -> nn.Module:
        """What actors get (policy and critic 1) and evaluation runs (the policy)."""
        return self.online

    def step(self, batch: DeviceBatch) -> StepResult:
        import torch

        config, settings, online = self.config, self.settings, self.online
        transitions, weights = batch.transitions, batch.weights
        observations, actions = transitions["obs"], transitions["action"]
        scale, offset = online.policy.scale, online.policy.offset
        with torch.no_grad():
            next_observations = transitions["next_obs"]
            noise = (torch.randn_like(actions) * settings.target_noise).clamp(
                -settings.noise_clip, settings.noise_clip
            )
            next_actions = torch.clamp(
                self.target.policy(next_observations) + noise * scale,
                offset - scale,
                offset + scale,
            )
            next_value = self.target.critic(next_observations, next_actions)
            if settings.twin_critics:
                next_value = torch.minimum(
                    next_value, self.target_critic2(next_observations, next_actions)
                )
            targets = transitions["reward"] + transitions["discount"] * next_value
        q1 = online.critic(observations, actions)
        td = targets - q1
        squared = td.square()
        if settings.twin_critics:
            squared = squared + (targets - self.critic2(observations, actions)).square()
        critic_loss = (weights * squared).mean()
        critics = [*online.critic.parameters(), *self.critic2.parameters()]
        skipped = descend(self.critic_optimizer, critic_loss, critics, config.max_grad_norm)
        self.steps += 1
        if self.steps % settings.policy_delay == 0:
            skipped = torch.maximum(skipped, self._improve_policy(observations))
        magnitude = td.detach().abs()
        return StepResult(
            loss=float(critic_loss.detach()),
            mean_abs_td=float(magnitude.mean()),
            new_priorities=(magnitude + config.priority_epsilon).double().cpu(),
            skipped=bool(skipped),
        )

    def _improve_policy(self, observations: torch.Tensor) -> torch.Tensor:
        """The policy's step and the soft target updates; 1 on the device where a
        non-finite loss or gradient skipped the policy's step (``descend``)."""
        online = self.online
        online.critic.requires_grad_(False)  # the policy's loss moves the policy only
        policy_loss = -online.critic(observations, online.policy(observations)).mean()
        skipped = descend(
            self.policy_optimizer,
            policy_loss,
            online.policy.parameters(),
            self.config.max_grad_norm,
        )
        online.critic.requires_grad_(True)
        soft_update(self.target, online, self.settings.tau)
        soft_update(self.target_critic2, self.critic2, self.settings.tau)
        return skipped

    def state_dict(self) -> dict:
        import torch

        return {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "critic2": self.critic2.state_dict(),
            "target_critic2": self.target_critic2.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "policy_optimizer": self.policy_optimizer.state_dict(),
            "steps": torch.tensor(self.steps),
        }

    def load_state_dict(self, state: dict) -> None:
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.critic2.load_state_dict(state["critic2"])
        self.target_critic2.load_state_dict(state["target_critic2"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        if "steps" in state:
            self.steps = int(state["steps"])
