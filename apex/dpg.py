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

With one critic (``learner.twin_critics = false``, the default), ``y = R + d · Q1'(s', ã)``
and only ``Q1`` is trained; ``policy_delay = 1`` and ``target_noise = 0`` (the defaults)
make it plain DDPG. ``twin_critics = true``, ``policy_delay = 2`` and ``target_noise =
0.2`` make it TD3 (Fujimoto et al. 2018).

Why DDPG by default, measured (bench/RESULTS.md, "Which DPG"): an Ape-X learner is the
bottleneck, so what each update achieves decides how fast a run learns. A TD3 update
costs about what a DDPG one does (224 and 231 updates/s of 256 here), but TD3 moves the
policy on every second update only and learns from a pessimistic target. On this 2-core
machine, 10 minutes each, DDPG ended ahead on HalfCheetah-v5 (5,430 and 5,865 against
3,610 and 4,596, seeds 0 and 1) and on Hopper-v5 (1,202 against 320), and solved Pendulum
as fast (32.4 s median against 35.4 s). TD3 is the choice where updates are cheap beside
the data (a GPU learner) and a run long enough for DDPG's overestimation to bite.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from apex.dqn import StepResult, adam
from apex.networks import ActorCritic, Critic
from apex.settings import LearnerConfig
from apex.staging import DeviceBatch


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target ← (1 − tau)·target + tau·online``, parameter by parameter."""
    with torch.no_grad():
        for kept, new in zip(target.parameters(), online.parameters(), strict=True):
            kept.lerp_(new, tau)


class DPG:
    """Deterministic policy gradient on n-step prioritized batches: DDPG, or with TD3's
    twin critics, target smoothing and delayed policy updates, as ``config`` says.

    Args:
        config: the learner's settings (widths, learning rate, tau, delays, noise).
        observation_size: ``d`` of the ``(d,)`` observations.
        low, high: the action bounds.
        device: where the networks live.
    """

    def __init__(
        self, config: LearnerConfig, observation_size: int, low, high, device: torch.device
    ) -> None:
        self.config = config
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
        config = self.config
        settings = (
            ("twin critics", config.twin_critics),
            ("policy delay", config.policy_delay > 1),
            ("target smoothing", config.target_noise > 0),
        )
        fixes = [name for name, on in settings if on]
        return {0: "DDPG", 3: "TD3"}.get(len(fixes), f"DPG ({', '.join(fixes)})")

    @property
    def policy(self) -> nn.Module:
        """What actors get (policy and critic 1) and evaluation runs (the policy)."""
        return self.online

    def step(self, batch: DeviceBatch) -> StepResult:
        config, online = self.config, self.online
        transitions, weights = batch.transitions, batch.weights
        observations, actions = transitions["obs"], transitions["action"]
        scale, offset = online.policy.scale, online.policy.offset
        with torch.no_grad():
            next_observations = transitions["next_obs"]
            noise = (torch.randn_like(actions) * config.target_noise).clamp(
                -config.noise_clip, config.noise_clip
            )
            next_actions = torch.clamp(
                self.target.policy(next_observations) + noise * scale,
                offset - scale,
                offset + scale,
            )
            next_value = self.target.critic(next_observations, next_actions)
            if config.twin_critics:
                next_value = torch.minimum(
                    next_value, self.target_critic2(next_observations, next_actions)
                )
            targets = transitions["reward"] + transitions["discount"] * next_value
        q1 = online.critic(observations, actions)
        td = targets - q1
        squared = td.square()
        if config.twin_critics:
            squared = squared + (targets - self.critic2(observations, actions)).square()
        critic_loss = (weights * squared).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(
            [*online.critic.parameters(), *self.critic2.parameters()], config.max_grad_norm
        )
        self.critic_optimizer.step()
        self.steps += 1
        if self.steps % config.policy_delay == 0:
            self._improve_policy(observations)
        magnitude = td.detach().abs()
        return StepResult(
            loss=float(critic_loss.detach()),
            mean_abs_td=float(magnitude.mean()),
            new_priorities=(magnitude + config.priority_epsilon).double().cpu(),
        )

    def _improve_policy(self, observations: torch.Tensor) -> None:
        online = self.online
        online.critic.requires_grad_(False)  # the policy's loss moves the policy only
        policy_loss = -online.critic(observations, online.policy(observations)).mean()
        self.policy_optimizer.zero_grad(set_to_none=True)
        policy_loss.backward()
        nn.utils.clip_grad_norm_(online.policy.parameters(), self.config.max_grad_norm)
        self.policy_optimizer.step()
        online.critic.requires_grad_(True)
        soft_update(self.target, online, self.config.tau)
        soft_update(self.target_critic2, self.critic2, self.config.tau)

    def state_dict(self) -> dict:
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
