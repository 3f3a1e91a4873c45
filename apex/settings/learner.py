"""The learner's settings (``[learner]``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from apex.settings.actor import ENV_STEPPINGS
from apex.settings.widths import hidden_problems
from replay.store.field_checks import (
    checked,
    in_unit_interval,
    named,
    not_positive_integers,
    positive_or_none,
)

DEVICES = ("auto", "cpu", "cuda")
REPLAY_IO_MODES = ("auto", "thread", "inline")
EVAL_STEPPINGS = ("actors", *ENV_STEPPINGS)
MAX_NICENESS = 19


@dataclass(frozen=True)
class LearnerConfig:
    """Settings of the learner.

    Attributes:
        env: environment preset or gymnasium id.
        hidden: MLP widths (actors build the same network).
        network: a user's network factory, ``"package.module:function"``, called with
            the observation and action spaces (gymnasium's, as stored: shape and dtype)
            and returning a torch module that gives the algorithm's outputs (DQN: Q-values
            ``[B, actions]``; IMPALA: logits ``[B, actions]`` and values ``[B]``); the
            learner and every actor (in torch) build it; "" for the built-in networks.
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
        eval_every_steps: env steps (all actors together) between greedy evaluations,
            each in the run's evaluator process (``apex.learning.evaluator``); 0: none.
        eval_episodes: episodes per evaluation.
        eval_epsilon: with ``Discrete`` actions, the probability of a random action at
            each evaluation step (0: greedy, the learning benchmark's protocol; the Atari
            preset's 0.05 is the Nature DQN's, which also frees a policy stuck where it
            never acts, as Breakout before FIRE).
        eval_stepping: how the evaluator's copies step (``apex.envs.stepping``):
            "actors" (as ``actor.env_stepping``), "serial", "threads" or "processes". An
            evaluation plays its episodes side by side, so with a slow env "threads"
            takes about one episode's time where "serial" takes their sum (20 episodes of
            CartPole at 5 ms a step: 2.5 s against 50 s), and evaluations keep their
            cadence however many actors feed the learner.
        eval_lanes: evaluations the evaluator plays at once, each on a copy of the policy
            and envs of its own (``apex.learning.evaluator``): with a slow env an evaluation
            takes seconds, and weights published meanwhile would never be evaluated, so a
            solve would be seen up to one evaluation late.
        eval_backlog: cadence points whose weights wait for a free evaluation lane, oldest
            first (0: only the newest waits, and the points it passed are skipped). With a
            backlog every cadence point is evaluated in order however late, so a solve is
            found at the first point that reaches it; each waiting point holds a copy of
            the weights (a Nature CNN's: 7 MB).
        eval_niceness: the evaluator process's niceness (0-19, ``os.nice``): an evaluation
            measures training, so it takes the cores the actors, shards and learner leave
            (with a backlog its verdict comes later but finds the same weights).
        confirm_episodes: episodes that confirm an evaluation at the target (0: an
            evaluation at the target is a solve by itself).
        target_return: the mean that solves the env (None: the preset's).
        stop_when_solved: end the run at its first confirmed solve (False: train on,
            and keep evaluating, to see whether it stays solved).
        max_updates: stop after this many updates (None: no limit).
        max_skipped_updates: updates in a row whose loss or gradient is not finite (each
            skipped and counted) after which the run stops, as "non-finite training".
        max_time_s: stop after this many seconds of training (None: no limit).
        checkpoint_interval_s: seconds between checkpoints.
        metrics_interval_s: seconds between metrics records.
        metrics_max_mb: the size past which ``metrics.jsonl`` is rotated; it and its 3 kept
            older parts take at most 4 times this (``apex.learning.file_parts``).
        seed: the run's root seed.
        torch_threads: intra-op threads for training on the CPU.
    """

    env: str = "CartPole-v1"
    hidden: tuple[int, ...] = (256, 256)
    network: str = ""
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
    eval_every_steps: int = 10_000
    eval_episodes: int = 20
    eval_epsilon: float = 0.0
    eval_stepping: str = "actors"
    eval_lanes: int = 1
    eval_backlog: int = 0
    eval_niceness: int = 10
    confirm_episodes: int = 100
    target_return: float | None = None
    stop_when_solved: bool = True
    max_updates: int | None = None
    max_skipped_updates: int = 100
    max_time_s: float | None = None
    checkpoint_interval_s: float = 60.0
    metrics_interval_s: float = 2.0
    metrics_max_mb: float = 64.0
    seed: int = 0
    torch_threads: int = 1

    def problems(self, prefix: str = "learner.") -> list[str]:
        """Every problem with these settings (empty if none)."""
        return checked(self, prefix, lambda: self._range_problems(prefix))

    def learning_rate_at(self, updates: int) -> float:
        """The step size after ``updates`` updates (see ``learning_rate_final``)."""
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
            problems.append(
                f"{prefix}learning_rate_decay_updates must be an integer >= 1 "
                f"with a learning_rate_final, got {updates!r}"
            )
        return problems

    def _range_problems(self, prefix: str) -> list[str]:
        counts = (
            "batch_size",
            "publish_period",
            "prefetch",
            "eval_episodes",
            "eval_lanes",
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
        for name in ("adam_epsilon", "priority_epsilon", "metrics_max_mb"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                problems.append(f"{prefix}{name} must be finite and > 0, got {value}")
        for name in ("eval_every_steps", "confirm_episodes", "eval_backlog"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                problems.append(f"{prefix}{name} must be an integer >= 0, got {value!r}")
        problems += in_unit_interval(f"{prefix}eval_epsilon", self.eval_epsilon)
        if not (isinstance(self.eval_niceness, int) and 0 <= self.eval_niceness <= MAX_NICENESS):
            problems.append(
                f"{prefix}eval_niceness must be an integer in [0, {MAX_NICENESS}], "
                f"got {self.eval_niceness!r}"
            )
        if self.eval_stepping not in EVAL_STEPPINGS:
            problems.append(
                f"{prefix}eval_stepping must be one of {EVAL_STEPPINGS}, got {self.eval_stepping!r}"
            )
        if not isinstance(self.stop_when_solved, bool):
            problems.append(
                f"{prefix}stop_when_solved must be true or false, got {self.stop_when_solved!r}"
            )
        if self.target_return is not None and not math.isfinite(self.target_return):
            problems.append(f"{prefix}target_return must be finite, got {self.target_return}")
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
