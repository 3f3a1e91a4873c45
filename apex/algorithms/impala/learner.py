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

:class:`Impala` is the learner's algorithm object; :class:`ImpalaActing` is an actor's:
it samples actions from its copy of π and keeps ``log μ(a|x)`` for the unroll. The module
is IMPALA's entry in ``apex.algorithms.registry.ALGORITHMS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from apex.algorithms.impala.unrolls import UnrollBuilder
from apex.algorithms.policy import build_policy_value
from replay.store.field_checks import checked
from replay.store.spec import TransitionSpec

if TYPE_CHECKING:
    import torch
    from torch import nn

    from apex.algorithms.optimizer import Adam
    from apex.algorithms.updates import StepResult
    from apex.envs.families import EnvShape
    from apex.learning.staging import DeviceBatch
    from apex.settings import ActorConfig, LearnerConfig


@dataclass(frozen=True)
class Settings:
    """The run config's ``[learner.impala]``.

    Attributes:
        rho_bar: ρ̄, the truncation of the importance weights in the value targets.
        c_bar: c̄, the truncation of the traces (at most ``rho_bar``).
        pg_rho_bar: the truncation of the policy gradient's weights.
        baseline_cost: the value loss's weight.
        entropy_cost: the entropy bonus's weight.
        correction: V-trace's importance weights; false fixes them at 1 (the ablation).
    """

    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    correction: bool = True

    def problems(self, prefix: str = "learner.impala.") -> list[str]:
        def more() -> list[str]:
            found = []
            for name in ("rho_bar", "c_bar", "pg_rho_bar"):
                value = getattr(self, name)
                if not (isinstance(value, int | float) and value > 0 and not math.isnan(value)):
                    found.append(f"{prefix}{name} must be a positive number, got {value!r}")
            for name in ("baseline_cost", "entropy_cost"):
                value = getattr(self, name)
                if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                    found.append(f"{prefix}{name} must be a finite number >= 0, got {value!r}")
            if not found and self.c_bar > self.rho_bar:
                found.append(f"{prefix}c_bar ({self.c_bar}) must not exceed "
                             f"{prefix}rho_bar ({self.rho_bar})")  # fmt: skip
            return found

        return checked(self, prefix, more)


def shape_problems(shape: EnvShape, env: str) -> list[str]:
    """IMPALA takes the observations its networks do; actions are Discrete (the registry
    checks that)."""
    return []


def build_learner(
    config: LearnerConfig, settings: Settings, shape: EnvShape, device: torch.device
) -> Impala:
    return Impala(config, settings, shape.observation_shape, shape.actions, device)


def build_acting(config: ActorConfig, shape: EnvShape) -> ImpalaActing:
    return ImpalaActing(config, shape)


def transition_spec(shape: EnvShape, config: ActorConfig) -> TransitionSpec:
    """What IMPALA's actors send and its queues keep: one unroll per item
    (``apex.algorithms.impala.unrolls``), ``T = actor.unroll_length``."""
    steps = config.unroll_length
    action = ((steps,), "int64")
    return TransitionSpec.from_dict(
        {
            "obs": ((steps + 1, *shape.observation_shape), shape.observation_dtype),
            "action": action,
            "reward": ((steps,), "float32"),
            "discount": ((steps,), "float32"),
            "log_prob": ((steps,), "float32"),
            "version": ((), "int64"),
        }
    )


def build_experience(
    config: ActorConfig,
    shape: EnvShape,
    policy: ImpalaActing,
    version: Callable[[], int],
    frame_refs: bool = False,
) -> UnrollMaker:
    """The actor's builder of what it sends: unrolls of its envs (``version``: the policy
    version the actor acts with now; ``frame_refs``: for frame shards)."""
    return UnrollMaker(config, shape, policy, version, frame_refs)


class UnrollMaker:
    """Unrolls from an actor's vector steps, with the log-probabilities its policy acted
    with and, where an episode hit its time limit, the policy's value of the final
    observation (``apex.algorithms.impala.unrolls``). Takes the actor's step as the n-step builder
    does.

    With ``frame_refs`` (frame shards, ``apex.acting.frame_writer``) an unroll keeps no
    observations: its ``refs`` are the env and the frame numbers of its ``T + 1``
    observations, made from the ``(env, frame number)`` pairs each step hands in."""

    def __init__(
        self,
        config: ActorConfig,
        shape: EnvShape,
        policy: ImpalaActing,
        version: Callable[[], int],
        frame_refs: bool = False,
    ) -> None:
        self._policy = policy
        self._version = version
        self._frame_refs = frame_refs
        kept_shape, kept_dtype = shape.observation_shape, shape.observation_dtype
        if frame_refs:
            kept_shape, kept_dtype = (2,), np.dtype(np.int64)
        self._builder = UnrollBuilder(config.envs_per_actor, config.unroll_length, config.gamma,
                                      kept_shape, kept_dtype)  # fmt: skip

    def step(self, observations, actions, rewards, final_observations, terminated, truncated,
             refs=None):  # fmt: skip
        """Returns finished unrolls, one per env, or None. ``final_observations`` are the
        next observations with each ended episode's final one in its place; ``refs``
        (with ``frame_refs``): the ``(env, frame number)`` pairs of ``observations`` and
        of ``final_observations``."""
        final_values = None
        cut = np.flatnonzero(np.logical_and(truncated, np.logical_not(terminated)))
        if cut.size:
            final_values = np.zeros(len(actions))
            final_values[cut] = self._policy.values(final_observations[cut])
        kept, kept_final = refs if self._frame_refs else (observations, final_observations)
        unrolls = self._builder.step(
            kept, actions, rewards, kept_final, terminated, truncated,
            self._policy.last_log_probs, final_values, self._version(),
        )  # fmt: skip
        if unrolls is not None and self._frame_refs:
            pairs = unrolls.pop("obs")  # (envs, T + 1, 2): env, frame number
            unrolls["refs"] = np.column_stack([pairs[:, 0, 0], pairs[:, :, 1]])
        return unrolls


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
    network: nn.Module, unrolls: dict[str, torch.Tensor], settings: Settings
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
        settings: its ``[learner.impala]`` section.
        observation_shape: one observation's shape.
        actions: the number of discrete actions.
        device: where the network lives.
    """

    def __init__(
        self,
        config: LearnerConfig,
        settings: Settings,
        observation_shape: tuple[int, ...],
        actions: int,
        device: torch.device,
    ) -> None:
        from apex.algorithms.networks import PolicyValueNet
        from apex.algorithms.updates import adam

        self.config = config
        self.settings = settings
        self.network = PolicyValueNet(observation_shape, actions, config.hidden).to(device)
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
        skipped = descend(self.optimizer, loss, self.network.parameters(),
                          self.config.max_grad_norm)  # fmt: skip
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

    keeps_confirmed_weights = False
    follows_better_confirmations = False

    def solved(self, confirmed: dict[str, torch.Tensor] | None = None) -> None:
        """Nothing changes at a solve."""

    def back_to_anchor(self) -> bool:
        """No anchor to go back to."""
        return False

    def load_state_dict(self, state: dict) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state.get("steps", 0))


def sample_actions(
    logits: np.ndarray, rng: np.random.Generator, greedy: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """An action per row drawn from ``softmax(logits)`` (the most likely one in the rows
    ``greedy`` marks), and its log-probability (float64 softmax, so a row's probabilities
    sum to 1 whatever the logits' scale)."""
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    cumulative = np.cumsum(np.exp(log_probs), axis=1)
    draws = rng.random((len(logits), 1)) * cumulative[:, -1:]
    actions = np.minimum((cumulative <= draws).sum(axis=1), logits.shape[1] - 1)
    if greedy is not None:
        actions = np.where(greedy, logits.argmax(axis=1), actions)
    return actions.astype(np.int64), log_probs[np.arange(len(logits)), actions]


class ImpalaActing:
    """An actor's IMPALA: its copy of π (numpy for vector observations, torch for images),
    sampling actions and keeping their log-probabilities for V-trace.

    Its exploration is π's own randomness: an env copy with scale 1 samples from π, one
    with scale 0 acts greedily (an evaluation). ``last_log_probs`` holds ``log π(a|x)`` of
    the actions of the latest :meth:`explore`, for the unroll."""

    def __init__(self, config: ActorConfig, shape: EnvShape) -> None:
        self.network = build_policy_value(
            shape.observation_shape, shape.actions, config.hidden, seed=config.actor_seed,
            torch_threads=config.torch_threads, precision=config.acting_precision,
            requantize_every=config.weight_refresh_steps,
        )  # fmt: skip
        self.last_log_probs = np.zeros(0)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.network.parameter_shapes()

    def load(self, arrays) -> None:
        self.network.load(arrays)

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        """Sampled actions where ``scales`` > 0, greedy ones where 0."""
        logits, _ = self.network.logits_and_values(observations)
        actions, self.last_log_probs = sample_actions(logits, rng, np.asarray(scales) == 0)
        return actions

    def values(self, observations: np.ndarray) -> np.ndarray:
        """``V(x)`` per row, float64 (the time-limit bootstrap of a truncated episode)."""
        return self.network.logits_and_values(observations)[1].astype(np.float64)

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """No priorities: a queue hands unrolls out in order (zeros, which it ignores)."""
        return np.zeros(len(batch["action"]))
