"""The run's evaluator: a process of its own that takes the learner's published weights and
plays greedy episodes with them, so that evaluating never stalls training (the Ape-X
paper's evaluator actors; before it, a 10-episode LunarLander evaluation on the learner's
thread cut its updates/s from about 130 to 35-60).

Cadence, in env steps (the same rule a peer in the learning benchmark follows): every
WEIGHTS message carries the env steps the actors had reported when it was published, and
the first weights at or past each multiple of ``every_steps`` are evaluated on
``episodes`` episodes. An evaluator still busy when later multiples pass evaluates the
newest weights once it is free and says how many points it skipped. An evaluation whose
mean reaches the target is confirmed at once: the same weights play ``confirm_episodes``
more episodes on other seeds (gymnasium's definition of solving CartPole-v1 is a mean of
475 over 100 consecutive episodes), and only a confirmed solve counts as one. After the
first confirmed solve (a run that trains on) evaluations are periodic only: confirming
every later one kept a CartPole evaluator busy on a core.

An evaluation of a slow env is long (20 episodes of 500 steps at 5 ms a step: 2.5 s with
its copies side by side, as many again to confirm), and weights published meanwhile are
never evaluated, so a solve is seen up to one evaluation late. With ``lanes`` > 1 the
evaluator plays that many evaluations at once, each lane on threads, envs and a copy of
the policy of its own: a free lane takes the next cadence point while the others play.
With a ``backlog``, every cadence point's weights are kept as they pass (up to that
many) and evaluated in order, however late: a solve is then found at the first cadence
point that reaches it, and timed at that point's publication, at the cost of a verdict
that comes later when the evaluator is behind.

Results go to the learner's episodes socket as EVALUATION messages (``apex.learning.evaluation``);
the learner writes them to its metrics and stops on a confirmed solve. The evaluator
stops on SIGTERM, and by itself once the process that started it (the learner's role) is
gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import zmq

from apex.algorithms.protocols import ActingPolicy
from apex.channels import EPISODES_HWM
from apex.envs.guard import FaultTally
from apex.envs.vector import evaluation_envs
from apex.envs.watchdog import StepWatchdog
from apex.learning.evaluation import Evaluation, EvaluationFailed, play_greedy
from apex.learning.kept_weights import KeptWeights
from apex.weights import WeightSubscriber
from replay.wire.layout import encode
from replay.wire.security import SecurityConfig, make_context
from replay.wire.transport import make_socket, send_frames

logger = logging.getLogger(__name__)

# How long one wait for weights lasts before the stop flag and the parent are looked at.
POLL_MS = 200
# Evaluation episodes are seeded apart from training's; a confirmation apart from both.
EVAL_SEED_OFFSET = 10_000_000
CONFIRM_SEED_OFFSET = 20_000_000


@dataclass(frozen=True)
class EvaluatorConfig:
    """What and when to evaluate (``LearnerConfig``'s evaluation settings).

    Attributes:
        env: the preset or gymnasium id.
        seed: the run's root seed.
        every_steps: env steps between evaluations.
        episodes: episodes per periodic evaluation.
        confirm_episodes: episodes of a confirmation (0: none; a periodic evaluation at
            the target is then a solve by itself).
        target_return: the mean that asks for a confirmation (None: never).
        epsilon: the probability of a random action at each evaluation step
            (``LearnerConfig.eval_epsilon``).
        stepping: how its copies step (``LearnerConfig.eval_stepping``): with a slow env,
            ``"threads"`` plays an evaluation's episodes side by side in about one
            episode's time, where one after another they took the episodes' sum.
        lanes: evaluations played at once (``LearnerConfig.eval_lanes``), one policy given
            per lane.
        niceness: what its process's niceness is raised by (``LearnerConfig.eval_niceness``;
            its launcher applies it).
        backlog: cadence points whose weights wait for a free lane, oldest first
            (``LearnerConfig.eval_backlog``); 0 or 1: only the newest waits, and the
            points it passed are skipped.
        keep_dir: where the weights of the best evaluation and of the confirmed solve
            are kept (``apex.learning.kept_weights``; None: not kept).
        step_timeout_s: an env step this long ends the process, as an actor's
            (``apex.envs.watchdog``; None: never).
    """

    env: str
    seed: int
    every_steps: int
    episodes: int
    confirm_episodes: int
    target_return: float | None
    epsilon: float = 0.0
    stepping: str = "serial"
    lanes: int = 1
    backlog: int = 0
    niceness: int = 0
    keep_dir: Path | None = None
    step_timeout_s: float | None = None


@dataclass
class _Pending:
    """A cadence point's weights, waiting for a free lane."""

    version: int
    steps: int
    skipped: int
    arrays: dict[str, np.ndarray]


class _Arriving:
    """Holds the newest published weights (a ``WeightTaker``) until :meth:`kept` copies
    them for a cadence point; weights between cadence points are never copied."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]) -> None:
        self._shapes = shapes
        self._arrays: dict[str, np.ndarray] = {}

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return self._shapes

    def load(self, arrays) -> None:
        self._arrays = dict(arrays)

    def kept(self) -> dict[str, np.ndarray]:
        """A copy of the newest weights of their own, to wait for a lane."""
        return {name: np.array(array, copy=True) for name, array in self._arrays.items()}


@dataclass
class _Lane:
    """One evaluation at a time: a policy, its envs by episode count, what it plays now."""

    policy: ActingPolicy
    # Made once and reset with new seeds: an Atari copy loads its ROM when made.
    envs: dict[int, gym.vector.VectorEnv] = field(default_factory=dict)
    playing: Future | None = None

    @property
    def free(self) -> bool:
        return self.playing is None or self.playing.done()


class Evaluator:
    """Construct in the evaluator's process; :meth:`run` until :meth:`stop`.

    Args:
        config: what and when.
        policy: the run's acting policy (``apex.algorithms.registry.build_acting``), played at zero
            exploration; with ``config.lanes`` > 1, one such policy per lane.
        weights, episodes: the learner's endpoints.
        security: the run's keys, as an actor's.
        parent_pid: stop once this process is gone (None: never look).
    """

    def __init__(
        self,
        config: EvaluatorConfig,
        policy: ActingPolicy | Sequence[ActingPolicy],
        weights: str,
        episodes: str,
        security: SecurityConfig | None = None,
        parent_pid: int | None = None,
    ) -> None:
        self.config = config
        policies = list(policy) if isinstance(policy, Sequence) else [policy]
        if len(policies) != config.lanes:
            raise ValueError(f"{len(policies)} policies for {config.lanes} evaluation lanes")
        self._lanes = [_Lane(p) for p in policies]
        self._pool = ThreadPoolExecutor(config.lanes, thread_name_prefix="evaluation")
        self._finished: queue.SimpleQueue[Evaluation] = queue.SimpleQueue()
        self._solved_lock = threading.Lock()
        self._parent_pid = parent_pid
        self._context = make_context(security, need_server_secret=False)
        self._weights = WeightSubscriber(self._context, weights)
        self._results = make_socket(self._context, zmq.PUSH, EPISODES_HWM)
        self._results.connect(episodes)
        self._stop = threading.Event()
        self._sequence = 0
        self.evaluations = 0
        self.failed = 0  # evaluations given up: their copies failed in too many episodes
        self.solved_mean: float | None = None  # the first confirmed mean at the target
        self._next_at = config.every_steps
        self._arriving = _Arriving(policies[0].parameter_shapes())
        self._pending: deque[_Pending] = deque()
        self._kept = KeptWeights(config.keep_dir) if config.keep_dir is not None else None

    @property
    def weights_version(self) -> int:
        """The newest weights version taken in (-1: none yet)."""
        return self._weights.version

    def stop(self) -> None:
        """Asks :meth:`run` to return after the evaluations under way (signal-safe)."""
        self._stop.set()

    def _orphaned(self) -> bool:
        return self._parent_pid is not None and os.getppid() != self._parent_pid

    def run(self) -> None:
        config = self.config
        logger.info(
            "evaluator: %s every %d env steps, %d episodes (confirmed on %d at %s), "
            "%d lane(s), copies stepped %s",
            config.env,
            config.every_steps,
            config.episodes,
            config.confirm_episodes,
            config.target_return,
            config.lanes,
            config.stepping,
        )
        watchdog = StepWatchdog(config.step_timeout_s, heartbeat=lambda _age: None)
        try:
            while not self._stop.is_set() and not self._orphaned():
                self._send_finished()
                self._start_free_lanes()
                # Every cadence point's weights are kept as they pass (up to the backlog);
                # the lanes take them oldest first.
                if self._weights.poll(self._arriving, timeout_ms=POLL_MS):
                    self._take(self._weights.version, self._weights.env_steps)
        finally:
            self.close()  # waits for the evaluations under way: the watchdog watches on
            watchdog.close()

    def _take(self, version: int, steps: int) -> None:
        """Weights just arrived: pending if they are the first at or past a cadence point."""
        config = self.config
        if steps < self._next_at:
            return
        skipped = (steps - self._next_at) // config.every_steps
        self._next_at = (steps // config.every_steps + 1) * config.every_steps
        pending = _Pending(version, steps, skipped, self._arriving.kept())
        if len(self._pending) >= max(1, config.backlog):
            # Full: the newest waiting point gives way to these, and counts as skipped.
            pending.skipped += self._pending.pop().skipped + 1
        self._pending.append(pending)

    def _start_free_lanes(self) -> None:
        for lane in self._lanes:
            if not self._pending:
                return
            if not lane.free:
                continue
            if lane.playing is not None:
                lane.playing.result()  # an evaluation that raised raises here
                lane.playing = None
            pending = self._pending.popleft()
            lane.policy.load(pending.arrays)  # the other lanes play on their own copies
            lane.playing = self._pool.submit(self._evaluate_or_say, lane, pending, self.evaluations)
            self.evaluations += 1

    def _evaluate_or_say(self, lane: _Lane, pending: _Pending, index: int) -> None:
        """:meth:`_evaluate`; one whose env copies failed in too many episodes is logged
        and counted, and the next cadence point is evaluated as usual."""
        try:
            self._evaluate(lane, pending, index)
        except EvaluationFailed as exc:
            self.failed += 1
            logger.warning(
                "evaluation %d of weights %d not made (%d so far): %s",
                index,
                pending.version,
                self.failed,
                exc,
            )

    def _evaluate(self, lane: _Lane, pending: _Pending, index: int) -> None:
        """One periodic evaluation on ``lane`` (its confirmation too, at the target); what
        it finds goes to the run's thread, which owns the socket."""
        config = self.config
        version, steps, skipped = pending.version, pending.steps, pending.skipped
        started = time.monotonic()
        faults = FaultTally(say_first=False)  # said per evaluation, below
        returns = self._play(
            lane, config.episodes, config.seed + EVAL_SEED_OFFSET + 1000 * index, faults
        )
        periodic = Evaluation(version, steps, returns, index, False, skipped, faults.replayed)
        if self._kept is not None:
            self._kept.periodic(pending.arrays, _facts(periodic))
        self._finished.put(periodic)
        logger.info(
            "evaluation %d: weights %d at %d env steps, mean %.1f over %d episodes (%.2f s)%s",
            index,
            version,
            steps,
            periodic.mean,
            returns.size,
            time.monotonic() - started,
            _replays(faults),
        )
        target = config.target_return
        if target is None or periodic.mean < target or not config.confirm_episodes:
            return
        with self._solved_lock:
            if self.solved_mean is not None:
                return
        faults = FaultTally(say_first=False)
        returns = self._play(
            lane, config.confirm_episodes, config.seed + CONFIRM_SEED_OFFSET + 1000 * index, faults
        )
        confirmation = Evaluation(version, steps, returns, index, True, skipped, faults.replayed)
        self._finished.put(confirmation)
        if confirmation.mean >= target:
            with self._solved_lock:
                first = self.solved_mean is None
                if first:
                    self.solved_mean = confirmation.mean
            if first and self._kept is not None:
                self._kept.solved(pending.arrays, _facts(confirmation))
        logger.info(
            "evaluation %d confirmed on %d episodes: mean %.1f (target %s)%s",
            index,
            returns.size,
            confirmation.mean,
            target,
            _replays(faults),
        )

    def _send_finished(self) -> None:
        while True:
            try:
                self._send(self._finished.get_nowait())
            except queue.Empty:
                return

    def _play(self, lane: _Lane, episodes: int, seed: int, faults: FaultTally):
        if episodes not in lane.envs:
            lane.envs[episodes] = evaluation_envs(self.config.env, episodes, self.config.stepping)
        return play_greedy(lane.policy, lane.envs[episodes], seed, self.config.epsilon, faults)

    def _send(self, evaluation: Evaluation) -> None:
        frames = encode(evaluation.to_message(self._sequence))
        self._sequence += 1
        # The learner drains its socket between updates; a full queue means it has
        # stopped, and an evaluation nobody reads is not worth blocking on.
        with contextlib.suppress(zmq.Again):
            send_frames(self._results, frames, zmq.NOBLOCK)

    def close(self) -> None:
        # The evaluations under way finish (an episode of a slow env, seconds) and are sent.
        self._pool.shutdown(wait=True)
        self._send_finished()
        for lane in self._lanes:
            for envs in lane.envs.values():
                envs.close()
        self._weights.close()
        self._results.close(linger=1000)
        self._context.term()


def _replays(faults: FaultTally) -> str:
    """What an evaluation's log line says of the episodes its copies failed in."""
    if not faults.replayed:
        return ""
    return f"; {faults.replayed} episodes played again, the latest fault: {faults.latest}"


def _facts(evaluation: Evaluation) -> dict:
    """What a file of kept weights says of the evaluation that kept them."""
    return {
        "version": evaluation.weight_version,
        "env_steps": evaluation.env_steps,
        "mean": evaluation.mean,
        "episodes": int(evaluation.returns.size),
        "confirmation": evaluation.confirmation,
    }
