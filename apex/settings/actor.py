"""An actor process's settings (``[actor]``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from apex.settings.widths import hidden_problems
from replay.inserts.endpoints import REROUTE_AFTER_S
from replay.store.field_checks import (
    checked,
    in_unit_interval,
    named,
    not_positive_integers,
    positive_or_none,
)

ACTING_PRECISIONS = ("float32", "int8")
# apex.envs.stepping's modes (named here too: settings import no env code).
ENV_STEPPINGS = ("serial", "threads", "processes")


@dataclass(frozen=True)
class ActorConfig:
    """Settings of one actor process.

    Attributes:
        env: environment preset or gymnasium id.
        actor_index: this actor's index ``i`` (sets its ε and seed).
        actor_count: actors in the run ``N``.
        envs_per_actor: environments stepped together ``k``.
        n_step: steps per transition, for the algorithms that send n-step transitions
            (DQN, DPG; IMPALA sends unrolls of ``impala.unroll_length``).
        gamma: discount.
        reward_scale: rewards are multiplied by it before they enter what the actor
            sends (n-step transitions, unrolls), so the learner's values and losses are
            in scaled units; the returns the actors and evaluations report are the
            env's own. A positive constant changes no optimal policy; it keeps an
            actor-critic's value loss from swamping its policy loss where rewards are
            large (LunarLander's ±100).
        epsilon_alpha: Ape-X's α, how the algorithm's exploration scale (DQN's ε, DPG's
            σ) spreads over the run's env copies: copy i of N explores at
            ``scale^(1 + α·i/(N−1))``.
        algorithm: "dqn", "dpg", "impala" or "auto" (from the action space; the run's
            setting).
        insert_batch: transitions per insert message.
        weight_refresh_steps: vector steps between weight refreshes.
        refresh_versions: a refresh loads weights only when they are at least this many
            versions newer than those held (1: the newest, always). Larger values hold
            the actor back on purpose, for studies of policy lag.
        lockstep: after each round of items (one per env: IMPALA's unrolls) the actor
            sends them and waits for the weights the learner publishes once it has
            trained on them, so the learner trains on the policy it holds (a policy lag
            of 0, at the cost of actors and learner taking turns). For algorithms whose
            replay is a queue; the run's rules for it are in ``launch.config.RunConfig``.
        hidden: MLP widths (must match the learner's).
        network: the learner's ``learner.network``, which the actors build too (set
            from it when the config is resolved).
        priority_epsilon: added to |TD| so no transition starts with priority 0.
        seed: the run's root seed; this actor uses ``seed + 1000 · (actor_index + 1)``.
        torch_threads: intra-op threads of the forward passes of a torch policy (image
            observations; vector observations act in numpy, single-threaded).
        env_threads: emulator threads of an ALE game's C++ vector env (other envs step
            as ``env_stepping`` says); per env group.
        env_stepping: how the copies of any other env step (``apex.envs.stepping``):
            "serial" (one after another on the actor's thread: a step of microseconds),
            "threads" (each on a thread of its own: an env whose step waits, a simulator
            elsewhere) or "processes" (each in a process of its own over shared memory:
            an env whose step computes in Python, given cores for it). The evaluator
            steps its copies the same way.
        env_groups: groups the envs step in, taking turns (``apex.acting.env_group``): with 2,
            one group's emulators play while the actor acts on the other's (ALE games
            only; it must divide ``envs_per_actor``).
        acting_precision: "float32", or "int8" for the forward passes of a policy of
            84x84 frames (the Nature convolutions): about 3x faster on a CPU core, greedy
            actions checked against the float network's (``apex.algorithms.int8_policy``).
        max_steps: stop after this many vector steps (None: until stopped).
        insert_timeout_s: how long one insert attempt waits for a shard with room before
            the actor checks its stop flag and tries again (so, how long a blocked actor
            may take to notice a stop).
        shard_start_timeout_s: how long the actor waits at start for every shard to answer
            (roles of a Slurm job all start at once).
        insert_credit: insert batches sent and not yet taken by the shards, at most (the
            credit, see ``replay.inserts.lane.ShardCredit``): bounds how stale the data waiting
            for the learner can be, and how far actors run ahead while the learner starts.
        reroute_after_s: a shard silent this long while others answer is given up, and
            the batches the actor kept for it go to the others (``replay.inserts.client``).
        step_timeout_s: an env step or reset that takes longer than this is a hang: the
            actor says which copy hung and for how long, and exits to be restarted
            (``apex.envs.watchdog``; None: no watchdog). Until then its heartbeats say
            it is stuck, with the step's age.
    """

    env: str = "CartPole-v1"
    actor_index: int = 0
    actor_count: int = 1
    envs_per_actor: int = 8
    n_step: int = 3
    gamma: float = 0.99
    reward_scale: float = 1.0
    epsilon_alpha: float = 7.0
    algorithm: str = "auto"
    insert_batch: int = 50
    weight_refresh_steps: int = 400
    refresh_versions: int = 1
    lockstep: bool = False
    hidden: tuple[int, ...] = (256, 256)
    network: str = ""
    priority_epsilon: float = 1e-3
    seed: int = 0
    torch_threads: int = 1
    env_threads: int = 1
    env_stepping: str = "serial"
    env_groups: int = 1
    acting_precision: str = "float32"
    max_steps: int | None = None
    insert_timeout_s: float = 0.25
    shard_start_timeout_s: float = 300.0
    insert_credit: int = 16
    reroute_after_s: float = REROUTE_AFTER_S
    step_timeout_s: float | None = 60.0

    @property
    def actor_seed(self) -> int:
        return self.seed + 1000 * (self.actor_index + 1)

    def problems(self, prefix: str = "actor.") -> list[str]:
        """Every problem with these settings (empty if none)."""
        return checked(self, prefix, lambda: self._range_problems(prefix))

    def _range_problems(self, prefix: str) -> list[str]:
        counts = (
            "envs_per_actor",
            "n_step",
            "insert_batch",
            "insert_credit",
            "weight_refresh_steps",
            "refresh_versions",
            "torch_threads",
            "env_threads",
            "env_groups",
        )
        problems = not_positive_integers(named(self, prefix, counts))
        if not problems:
            problems += self.group_problems(prefix)
        problems += in_unit_interval(f"{prefix}gamma", self.gamma)
        problems += hidden_problems(f"{prefix}hidden", self.hidden)
        for name in ("epsilon_alpha", "priority_epsilon"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:
                problems.append(f"{prefix}{name} must be finite and >= 0, got {value}")
        if not 0 < self.reward_scale < math.inf:
            problems.append(f"{prefix}reward_scale must be finite and > 0, got {self.reward_scale}")
        if self.env_stepping not in ENV_STEPPINGS:
            problems.append(
                f"{prefix}env_stepping must be one of {ENV_STEPPINGS}, got {self.env_stepping!r}"
            )
        if self.acting_precision not in ACTING_PRECISIONS:
            problems.append(
                f"{prefix}acting_precision must be one of {ACTING_PRECISIONS}, "
                f"got {self.acting_precision!r}"
            )
        problems += positive_or_none(
            {
                f"{prefix}insert_timeout_s": self.insert_timeout_s,
                f"{prefix}shard_start_timeout_s": self.shard_start_timeout_s,
                f"{prefix}reroute_after_s": self.reroute_after_s,
                f"{prefix}max_steps": self.max_steps,
                f"{prefix}step_timeout_s": self.step_timeout_s,
            }
        )
        return problems

    def group_problems(self, prefix: str = "actor.") -> list[str]:
        """What is wrong with ``env_groups`` for this env (empty if nothing)."""
        groups = self.env_groups
        if groups == 1:
            return []
        if self.envs_per_actor % groups:
            return [
                f"{prefix}env_groups ({groups}) must divide {prefix}envs_per_actor "
                f"({self.envs_per_actor})"
            ]
        from apex.envs.families import preset  # gymnasium's registry: only when groups are asked

        if not preset(self.env).atari:
            return [
                f"{prefix}env_groups > 1 needs an ALE game, whose emulators play on "
                f"threads of their own; {self.env} steps on the actor's thread"
            ]
        return []
