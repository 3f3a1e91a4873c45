"""Settings of the actor and learner roles: plain frozen dataclasses, free of torch.

They live apart from the roles so that building and validating a run's config (the
supervisor, a shard process, ``apex slurm submit``) never pays torch's second-long import.
Each validates itself (``problems``), naming every bad field with its value; rules that
span roles are ``launch.config.RunConfig``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from replay.inserts.endpoints import REROUTE_AFTER_S
from replay.store.field_checks import (
    checked,
    in_unit_interval,
    named,
    not_positive_integers,
    positive_or_none,
)

DEVICES = ("auto", "cpu", "cuda")
# Past these a network is a typo, not a design: a 10^9-wide layer fails allocating
# gigabytes in every role at once.
MAX_HIDDEN_LAYERS = 16
MAX_HIDDEN_WIDTH = 65_536
REPLAY_IO_MODES = ("auto", "thread", "inline")


def hidden_problems(name: str, hidden: object) -> list[str]:
    """Network widths: one to ``MAX_HIDDEN_LAYERS`` layers of 1 to ``MAX_HIDDEN_WIDTH``."""
    if (
        isinstance(hidden, (tuple, list))
        and 1 <= len(hidden) <= MAX_HIDDEN_LAYERS
        and all(isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= MAX_HIDDEN_WIDTH
                for w in hidden)
    ):  # fmt: skip
        return []
    return [
        f"{name} must be 1 to {MAX_HIDDEN_LAYERS} layer widths, each 1 to {MAX_HIDDEN_WIDTH}, "
        f"got {list(hidden) if isinstance(hidden, tuple) else hidden!r}"
    ]


ACTING_PRECISIONS = ("float32", "int8")


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
        priority_epsilon: added to |TD| so no transition starts with priority 0.
        seed: the run's root seed; this actor uses ``seed + 1000 · (actor_index + 1)``.
        torch_threads: intra-op threads of the forward passes of a torch policy (image
            observations; vector observations act in numpy, single-threaded).
        env_threads: emulator threads of an ALE game's C++ vector env (other envs step
            on the actor's own thread); per env group.
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
    priority_epsilon: float = 1e-3
    seed: int = 0
    torch_threads: int = 1
    env_threads: int = 1
    env_groups: int = 1
    acting_precision: str = "float32"
    max_steps: int | None = None
    insert_timeout_s: float = 0.25
    shard_start_timeout_s: float = 300.0
    insert_credit: int = 16
    reroute_after_s: float = REROUTE_AFTER_S

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
            problems.append(f"{prefix}reward_scale must be finite and > 0, "
                            f"got {self.reward_scale}")  # fmt: skip
        if self.acting_precision not in ACTING_PRECISIONS:
            problems.append(f"{prefix}acting_precision must be one of {ACTING_PRECISIONS}, "
                            f"got {self.acting_precision!r}")  # fmt: skip
        problems += positive_or_none(
            {
                f"{prefix}insert_timeout_s": self.insert_timeout_s,
                f"{prefix}shard_start_timeout_s": self.shard_start_timeout_s,
                f"{prefix}reroute_after_s": self.reroute_after_s,
                f"{prefix}max_steps": self.max_steps,
            }
        )
        return problems

    def group_problems(self, prefix: str = "actor.") -> list[str]:
        """What is wrong with ``env_groups`` for this env (empty if nothing)."""
        groups = self.env_groups
        if groups == 1:
            return []
        if self.envs_per_actor % groups:
            return [f"{prefix}env_groups ({groups}) must divide {prefix}envs_per_actor "
                    f"({self.envs_per_actor})"]  # fmt: skip
        from apex.envs.families import preset  # gymnasium's registry: only when groups are asked

        if not preset(self.env).atari:
            return [f"{prefix}env_groups > 1 needs an ALE game, whose emulators play on "
                    f"threads of their own; {self.env} steps on the actor's thread"]  # fmt: skip
        return []


@dataclass(frozen=True)
class SolvedConfig:
    """What a run that trains on past its solve (``learner.stop_when_solved = false``)
    does from then on, for any algorithm: the run config's ``[learner.solved]``.

    The learning loop applies it through the policy's weights alone
    (``apex.learning.solving``); nothing of it changes the run before its first
    confirmed solve.

    Attributes:
        settle_return: the confirmed mean from which the run settles: the step size,
            the restart and the averaged policy below start at the first confirmation
            at or above it. A solve under it stops the clock, and training goes on as
            before it, asking for better confirmations where ``follow_better`` is on.
            None: at the first confirmed solve.
        learning_rate: the step size once settled, whatever the schedule says (None:
            the schedule's).
        policy_average: 0, or the Polyak rate of an average of the policy's weights
            that actors act with and evaluation plays (``average ← (1 − rate)·average +
            rate·policy`` after each update), from the settle on (or from the start,
            with ``average_from_solve`` false).
        average_from_solve: start that average at the settle, from the policy then.
        restart: at the settle, training goes on from the weights the evaluation
            confirmed (``Algorithm.train_from``), undoing the updates made while the
            confirmation played; the averaged policy takes them too.
        back_to_confirmed: once settled, a periodic evaluation under the target puts
            the confirmed weights back in training (PBT's exploit step, a population of
            one), once for each stretch of weights published since it last did.
        follow_better: the evaluator also confirms each periodic evaluation that beats
            the best confirmed mean by ``follow_margin``, and a better confirmation's
            weights become those training goes back to.
        follow_margin: by how much a periodic evaluation must beat the best confirmed
            mean to be confirmed (a 20-episode mean beats a 100-episode one by chance
            once the policy is near it).
    """

    settle_return: float | None = None
    learning_rate: float | None = None
    policy_average: float = 0.0
    average_from_solve: bool = True
    restart: bool = False
    back_to_confirmed: bool = False
    follow_better: bool = False
    follow_margin: float = 0.0

    @property
    def keeps_confirmed_weights(self) -> bool:
        """Whether the learner keeps its newest publications' weights, for a restart or
        a return to confirmed ones."""
        return self.restart or self.back_to_confirmed

    @property
    def confirms_improvements(self) -> bool:
        """Whether the evaluator is asked for better confirmations: only where they are
        gone back to."""
        return self.follow_better and self.back_to_confirmed

    def problems(self, prefix: str = "learner.solved.") -> list[str]:
        def ranges() -> list[str]:
            problems = in_unit_interval(f"{prefix}policy_average", self.policy_average)
            rate = self.learning_rate
            if rate is not None and not (math.isfinite(rate) and rate > 0):
                problems.append(f"{prefix}learning_rate must be > 0 or None, got {rate}")
            bar = self.settle_return
            if bar is not None and not math.isfinite(bar):
                problems.append(f"{prefix}settle_return must be finite, got {bar}")
            if not 0 <= self.follow_margin < math.inf:
                problems.append(f"{prefix}follow_margin must be finite and >= 0, "
                                f"got {self.follow_margin}")  # fmt: skip
            return problems

        return checked(self, prefix, ranges)


@dataclass(frozen=True)
class LearnerConfig:
    """Settings of the learner.

    Attributes:
        env: environment preset or gymnasium id.
        hidden: MLP widths (actors build the same network).
        batch_size: transitions per update.
        learning_rate: Adam step size.
        learning_rate_final: with ``learning_rate_decay_updates``, the step size it
            decays to, linearly over that many updates, and keeps after (None: constant).
        learning_rate_decay_updates: the updates it decays over.
        adam_epsilon: Adam ε.
        max_grad_norm: gradient clipping threshold (global norm).
        algorithm: "dqn", "dpg", "impala" or "auto" (from the action space; the run's
            setting).
        publish_period: updates between weight publications.
        beta: importance-sampling exponent.
        priority_epsilon: added to |TD| for new priorities.
        prefetch: batches the sampler keeps in flight.
        replay_io: who drives the sampler's sockets: "thread" (a background thread),
            "inline" (the training thread, between steps) or "auto" (inline on the CPU,
            where a second Python thread slows each small step up to 2x through the GIL;
            the thread on CUDA, where it overlaps batch assembly with the device's work).
        device: "auto" (CUDA when present), "cpu" or "cuda".
        cuda_graph: on CUDA, DQN's update is captured in a CUDA graph and replayed
            (``apex.algorithms.dqn.graphed_step``; the host's kernel launches bound it there);
            False: every update eager.
        eval_every_steps: env steps (all actors together) between greedy evaluations,
            each in the run's evaluator process (``apex.learning.evaluator``); 0: none.
        eval_episodes: episodes per evaluation.
        confirm_episodes: episodes that confirm an evaluation at the target (0: an
            evaluation at the target is a solve by itself).
        target_return: the mean that solves the env (None: the preset's).
        stop_when_solved: end the run at its first confirmed solve (False: train on,
            and keep evaluating, to see whether it stays solved; ``solved`` says how).
        solved: what a run that trains on past its solve does (``[learner.solved]``).
        max_updates: stop after this many updates (None: no limit).
        max_skipped_updates: updates in a row whose loss or gradient is not finite (each
            skipped and counted) after which the run stops, as "non-finite training".
        max_time_s: stop after this many seconds of training (None: no limit).
        checkpoint_interval_s: seconds between checkpoints.
        metrics_interval_s: seconds between metrics records.
        seed: the run's root seed.
        torch_threads: intra-op threads for training on the CPU.
    """

    env: str = "CartPole-v1"
    hidden: tuple[int, ...] = (256, 256)
    batch_size: int = 512
    learning_rate: float = 1e-4
    learning_rate_final: float | None = None
    learning_rate_decay_updates: int = 0
    adam_epsilon: float = 1.5e-4
    max_grad_norm: float = 40.0
    algorithm: str = "auto"
    publish_period: int = 10
    beta: float = 0.4
    priority_epsilon: float = 1e-3
    prefetch: int = 4
    replay_io: str = "auto"
    device: str = "auto"
    cuda_graph: bool = True
    eval_every_steps: int = 10_000
    eval_episodes: int = 20
    confirm_episodes: int = 100
    target_return: float | None = None
    stop_when_solved: bool = True
    solved: SolvedConfig = field(default_factory=SolvedConfig)
    max_updates: int | None = None
    max_skipped_updates: int = 100
    max_time_s: float | None = None
    checkpoint_interval_s: float = 60.0
    metrics_interval_s: float = 2.0
    seed: int = 0
    torch_threads: int = 1

    def problems(self, prefix: str = "learner.") -> list[str]:
        """Every problem with these settings (empty if none)."""
        return checked(self, prefix, lambda: self._range_problems(prefix))

    def learning_rate_at(self, updates: int, solved: bool = False) -> float:
        """The step size after ``updates`` updates (see ``learning_rate_final``), and once
        settled (see ``SolvedConfig.learning_rate``)."""
        if solved and self.solved.learning_rate is not None:
            return self.solved.learning_rate
        if self.learning_rate_final is None:
            return self.learning_rate
        done = min(updates / self.learning_rate_decay_updates, 1.0)
        return self.learning_rate + (self.learning_rate_final - self.learning_rate) * done

    def _decay_problems(self, prefix: str) -> list[str]:
        final, updates = self.learning_rate_final, self.learning_rate_decay_updates
        problems = []
        if final is None:
            return problems
        if not (isinstance(final, (int, float)) and math.isfinite(final) and final > 0):
            problems.append(f"{prefix}learning_rate_final must be > 0, got {final}")
        if not isinstance(updates, int) or isinstance(updates, bool) or updates < 1:
            problems.append(f"{prefix}learning_rate_decay_updates must be an integer >= 1 "
                            f"with a learning_rate_final, got {updates!r}")  # fmt: skip
        return problems

    def _range_problems(self, prefix: str) -> list[str]:
        counts = (
            "batch_size",
            "publish_period",
            "prefetch",
            "eval_episodes",
            "torch_threads",
        )
        problems = not_positive_integers(named(self, prefix, counts))
        rate = self.learning_rate
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            problems.append(f"{prefix}learning_rate must be > 0, got {rate}")
        problems += self._decay_problems(prefix)
        if self.device not in DEVICES and not str(self.device).startswith("cuda:"):
            problems.append(f"{prefix}device must be auto, cpu or cuda[:N], got {self.device!r}")
        if self.replay_io not in REPLAY_IO_MODES:
            problems.append(
                f"{prefix}replay_io must be one of {', '.join(REPLAY_IO_MODES)}, "
                f"got {self.replay_io!r}"
            )
        problems += hidden_problems(f"{prefix}hidden", self.hidden)
        for name in ("adam_epsilon", "priority_epsilon"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                problems.append(f"{prefix}{name} must be finite and > 0, got {value}")
        for name in ("eval_every_steps", "confirm_episodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                problems.append(f"{prefix}{name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.stop_when_solved, bool):
            problems.append(f"{prefix}stop_when_solved must be true or false, got "
                            f"{self.stop_when_solved!r}")  # fmt: skip
        if self.target_return is not None and not math.isfinite(self.target_return):
            problems.append(f"{prefix}target_return must be finite, got {self.target_return}")
        problems += self.solved.problems(f"{prefix}solved.")
        if not (isinstance(self.beta, (int, float)) and 0 <= self.beta < math.inf):
            problems.append(f"{prefix}beta must be finite and >= 0, got {self.beta}")
        problems += positive_or_none(
            {
                f"{prefix}max_updates": self.max_updates,
                f"{prefix}max_time_s": self.max_time_s,
                f"{prefix}checkpoint_interval_s": self.checkpoint_interval_s,
                f"{prefix}metrics_interval_s": self.metrics_interval_s,
                f"{prefix}max_grad_norm": self.max_grad_norm,
            }
        )
        return problems
