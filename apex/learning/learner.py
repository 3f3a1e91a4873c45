"""The Ape-X learner loop: take a batch, update, send new priorities back, and between
updates do the periodic work (publish weights, read episode reports, evaluate, write
metrics, checkpoint).

The loop knows neither the algorithm (an :class:`apex.algorithms.registry.Algorithm`) nor where
batches come from (a :class:`BatchSource`, the sharded sampler in a run, a local store in
tests); both are handed in. Greedy evaluations come from the run's evaluator process
(``apex.learning.evaluator``), which takes the published weights: the learner writes each to its
metrics as it arrives and never plays an episode itself; what one means for the run
(solved or not) is ``apex.learning.solving``'s. Stop conditions: a confirmed
solve (an evaluation of ``confirm_episodes`` episodes at ``target_return``, when
``stop_when_solved``), ``max_updates``, ``max_time_s``, or a stop request (SIGINT/SIGTERM),
which leaves a final checkpoint either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from apex.algorithms.exploration import run_actors
from apex.algorithms.protocols import Algorithm
from apex.algorithms.updates import set_learning_rate
from apex.channels import EpisodeCollector
from apex.envs.families import solved_return
from apex.learning.checkpoint import LearnerCheckpoints
from apex.learning.delivery import final_account
from apex.learning.evaluation import read_evaluation
from apex.learning.metrics import MetricsWriter
from apex.learning.periodic import Periodic
from apex.learning.progress import LearnerCounters, ProgressWindow, waiting_record
from apex.learning.progress import describe as describe_progress
from apex.learning.solving import Solving
from apex.learning.staging import BatchSource
from apex.settings import LearnerConfig
from apex.weights import Publications, WeightPublisher
from replay.errors import ConfigError, ReplayError, ReplayTimeout
from replay.wire.layout import Message
from replay.wire.security import SecurityConfig, make_context

# Ends after which the run is over: its actors are told to stop.
RUN_OVER = ("solved", "max_updates", "max_time")
logger = logging.getLogger(__name__)

# With every shard unreachable this long, the learner gives up ("replay failed").
BATCH_TIMEOUT_S = 60.0
# The learner waits this long for one batch before looking at its stop flag again.
BATCH_POLL_S = 0.5
# Weights are published at least this often, however slow the updates.
PUBLISH_AT_LEAST_EVERY_S = 1.0
# Publications remembered to name the updates behind an evaluation's weights version.
PUBLICATIONS_KEPT = 4096


class NonFiniteTraining(RuntimeError):
    """Too many updates in a row had a loss or gradient that is not finite."""


@dataclass
class Outcome:
    """How a learner run ended."""

    reason: str
    solved: bool
    counters: LearnerCounters
    last_eval_return: float | None = None
    delivery: dict | None = None


class Learner:
    """Construct in the learner's process; read the bound endpoints; call :meth:`run`.

    Args:
        config: learner settings.
        algorithm: what trains (its networks already on ``device``).
        source: where batches come from; started and closed by :meth:`run`.
        device: where evaluation runs the policy.
        run_dir: where metrics and checkpoints go.
        resolved_config: the whole run's config, saved inside checkpoints.
        host: address to bind the weights and episodes sockets on.
        weights_port, episodes_port: ports (0: free ones).
        resume_from: a checkpoint to continue from.
        security: the run's keys (``replay.wire.security``) for the weights and episodes
            sockets.

    Raises:
        ValueError: ``resume_from`` is not a readable checkpoint.
        ConfigError: the keys cannot be used, or ``host`` is beyond loopback without keys
            or leave to run insecure.
    """

    def __init__(
        self,
        config: LearnerConfig,
        algorithm: Algorithm,
        source: BatchSource,
        device: torch.device,
        run_dir: Path,
        resolved_config: dict,
        host: str = "127.0.0.1",
        weights_port: int = 0,
        episodes_port: int = 0,
        resume_from: Path | None = None,
        security: SecurityConfig | None = None,
        items: str = "transitions",
    ) -> None:
        self.config = config
        self.algorithm = algorithm
        self.items = items
        self.source = source
        self.run_dir = run_dir
        self._device = device
        self._resolved_config = resolved_config
        self._checkpoints = LearnerCheckpoints(run_dir / "checkpoints", resolved_config)
        self.counters = LearnerCounters()
        if resume_from is not None:
            self.counters = self._checkpoints.restore(resume_from, algorithm)
        self._context = make_context(security)
        try:
            self._weights = Publications(
                WeightPublisher(self._context, host, weights_port),
                PUBLISH_AT_LEAST_EVERY_S,
                PUBLICATIONS_KEPT,
            )
            self._episodes = EpisodeCollector(
                self._context, host, episodes_port, on_evaluation=self._take_evaluation
            )
        except ConfigError:
            self._context.destroy(linger=0)
            raise
        self._stop = threading.Event()
        self.solving = Solving(config, solved_return(config.env, config.target_return))
        self._window = ProgressWindow()
        self._metrics: MetricsWriter | None = None
        self._started = time.monotonic()
        self._last_progress = self._last_waiting = self._started
        self._running = False
        # The health of processes kept beside the learner (its evaluator), each a dict
        # that every progress record and the end record carry.
        self.companions: list[Callable[[], dict]] = []
        self._skipped_in_a_row = 0

    @property
    def weights_endpoint(self) -> str:
        return self._weights.endpoint

    @property
    def episodes_endpoint(self) -> str:
        return self._episodes.endpoint

    def stop(self) -> None:
        """Asks :meth:`run` to finish (with a final checkpoint) after the current update."""
        self._stop.set()

    def _checkpoint_or_count(self) -> Path | None:
        return self._checkpoints.save(self.algorithm, self.counters, self._elapsed_s())

    def _elapsed_s(self) -> float:
        running = time.monotonic() - self._started if self._running else 0.0
        return self.counters.train_seconds + running

    def run(self) -> Outcome:
        config = self.config
        self._metrics = metrics = MetricsWriter(self.run_dir, int(config.metrics_max_mb * 2**20))
        self._weights.begin_life(self.counters.updates)  # after a resume's checkpoint
        self._publish()
        metrics.write(
            {
                "event": "start",
                "updates": self.counters.updates,
                "weight_version": self.counters.weight_version,
                "device": str(self._device),
                "algorithm": self.algorithm.variant,
                **run_actors(self._resolved_config),
            }
        )
        self._started = self._last_progress = time.monotonic()
        self._running = True
        outcome = Outcome("stopped", False, self.counters)
        tasks = Periodic()
        tasks.every(
            "publish",
            self._publish,
            seconds=PUBLISH_AT_LEAST_EVERY_S,
            updates=config.publish_period,
            start_updates=self.counters.updates,
        )
        tasks.every("episodes", self._take_episodes)
        tasks.every("progress", self._write_progress, seconds=config.metrics_interval_s)
        tasks.every("checkpoint", self._checkpoint_or_count, seconds=config.checkpoint_interval_s)
        first_update = True
        try:
            logger.info("waiting for the shards to hold data to sample")
            if not self.source.start(cancelled=self._stop, waiting=self._while_filling):
                if self._out_of_time():
                    outcome.reason = "max_time"
                    logger.warning(
                        "the run's %g s ran out before the shards held data to "
                        "sample: no update made",
                        config.max_time_s,
                    )
                else:
                    logger.info("stopped before the shards held data")
            else:
                logger.info("training on %s", self._device)
            while not self._stop.is_set():
                if config.max_updates is not None and self.counters.updates >= config.max_updates:
                    outcome.reason = "max_updates"
                    break
                if self._out_of_time():
                    outcome.reason = "max_time"
                    break
                if not self._train_one():
                    break
                if first_update:  # how long this life took to start training
                    metrics.write(
                        {
                            "event": "first_update",
                            "updates": self.counters.updates,
                            "time_s": self._elapsed_s(),
                        }
                    )
                    first_update = False
                tasks.run_due(self.counters.updates)
                if self.solving.solved and not outcome.solved:
                    outcome.solved = True
                    if config.stop_when_solved:
                        outcome.reason = "solved"
                        break
        except ReplayError as exc:
            outcome.reason = f"replay failed: {exc}"
            logger.error("learner stopping: %s", exc)
        except NonFiniteTraining as exc:
            outcome.reason = f"non-finite training: {exc}"
            logger.error("learner stopping: %s", exc)
        finally:
            self.counters.train_seconds = self._elapsed_s()
            self._running = False
            if outcome.reason in RUN_OVER:  # the actors stop (a stopped run may go on)
                self._weights.end_run()
            outcome.last_eval_return = self.solving.last_eval
            path = self._checkpoint_or_count()
            outcome.delivery, transitions_added = final_account(self.source, self._episodes)
            metrics.write(
                {
                    "event": "end",
                    "reason": outcome.reason,
                    "solved": outcome.solved,
                    # With updates and train_seconds, the run's last figures (a progress
                    # record is up to metrics_interval_s older): apex status and
                    # curves.png read them.
                    "transitions_added": transitions_added,
                    "updates": self.counters.updates,
                    "weight_version": self.counters.weight_version,
                    "train_seconds": self.counters.train_seconds,
                    "last_eval_return": self.solving.last_eval,
                    "checkpoint": str(path) if path else None,
                    "checkpoints_failed": self._checkpoints.failed,
                    "updates_skipped_nonfinite": self.counters.updates_skipped,
                    "metrics_dropped": metrics.dropped,
                    "evaluations": self.counters.evaluations,
                    **self._companions_health(),
                    "delivery": outcome.delivery,
                }
            )
            metrics.close()
            self.source.close()
            self.close()
        return outcome

    def _train_one(self) -> bool:
        """One update; False if a stop was asked for while waiting for a batch."""
        deadline = time.monotonic() + BATCH_TIMEOUT_S
        while True:
            try:
                batch = self.source.next_batch(timeout_s=BATCH_POLL_S)
                break
            except ReplayTimeout as exc:
                if self._stop.is_set():
                    return False
                # Actors' reports are taken while waiting (the rate limiter holds samples
                # until inserts catch up, or shards are down): their silences are timed
                # when they happen, and their queues do not fill.
                self._take_episodes()
                self._resend_weights_if_due()
                if time.monotonic() >= deadline:
                    # Name the wait that ran out, not the last short poll inside it.
                    raise ReplayTimeout(
                        f"no batch ready for {BATCH_TIMEOUT_S:.0f} s (shards "
                        "down, empty or rate-limited)"
                    ) from exc
        config = self.config
        if config.learning_rate_final is not None:
            rate = config.learning_rate_at(self.counters.updates)
            set_learning_rate(self.algorithm.optimizers, rate)
        result = self.algorithm.step(batch)
        if result.skipped:
            self._skipped_update()
            return True
        self._skipped_in_a_row = 0
        if result.new_priorities is not None:
            self.source.update_priorities(batch.source, result.new_priorities.numpy())
        if (versions := batch.source.transitions.get("version")) is not None:
            self._window.add_trained(self.counters.weight_version - versions)
        self.counters.updates += 1
        self.counters.transitions_trained += batch.source.indices.size
        self._window.add_update(result.loss, result.mean_abs_td, result.extras)
        return True

    def _skipped_update(self) -> None:
        """Counts an update a non-finite loss or gradient skipped; too many in a row end
        the run (:class:`NonFiniteTraining`) rather than train on nothing."""
        self.counters.updates_skipped += 1
        self._skipped_in_a_row += 1
        if self._skipped_in_a_row == 1:
            logger.warning(
                "update %d skipped: its loss or a gradient is not finite (%d skipped so far)",
                self.counters.updates,
                self.counters.updates_skipped,
            )
        if self._skipped_in_a_row >= self.config.max_skipped_updates:
            raise NonFiniteTraining(
                f"{self._skipped_in_a_row} updates in a row had a loss or gradient that is "
                f"not finite (learner.max_skipped_updates = {self.config.max_skipped_updates})"
                "; nothing of them was applied or published"
            )

    # -- periodic tasks (apex.learning.periodic) -------------------------------------------------

    def _publish(self) -> None:
        self.counters.weight_version += 1
        self._weights.publish(
            self.algorithm.policy,
            self.counters.weight_version,
            self.counters.updates,
            self._episodes.env_steps(),
            self._elapsed_s(),
        )

    def _out_of_time(self) -> bool:
        return self.config.max_time_s is not None and self._elapsed_s() >= self.config.max_time_s

    def _while_filling(self) -> None:
        if self._out_of_time():  # the time limit bounds the wait for data too
            self._stop.set()
            return
        self._resend_weights_if_due()
        now = time.monotonic()
        if now - self._last_waiting >= self.config.metrics_interval_s:
            self._last_waiting = now
            self._metrics.write(waiting_record(self.source.shard_states(), self._elapsed_s()))

    def _resend_weights_if_due(self) -> None:
        # While the learner waits for data (apex.weights.Publications). Weights trained
        # past the last publication go as a new version, never under its number: a
        # version names one set of parameters (an evaluation confirms a version, and a
        # solve restores the copy kept of it).
        if not self._weights.resend_due():
            return
        version, updates = self.counters.weight_version, self.counters.updates
        if self._weights.updates_behind(version) == updates:
            self._weights.send(self.algorithm.policy, version, updates, self._episodes.env_steps())
        else:
            self._publish()

    def _take_episodes(self) -> None:
        # Evaluations arrive on the same socket and are taken in the drain, in order.
        for _, version, value, _ in self._episodes.drain():
            lag = self.counters.weight_version - version if version >= 0 else None
            self._window.add_episode(value, lag)
            self.counters.episodes_seen += 1

    def _take_evaluation(self, message: Message) -> None:
        """An EVALUATION from the evaluator: written to the metrics; a confirmed one at
        the target marks the run solved (``ProtocolError``: refused, counted)."""
        evaluation = read_evaluation(message)
        if not evaluation.confirmation:
            self.counters.evaluations += 1
        published_s = self._weights.published_at_s(evaluation.weight_version)
        heard_s = self._elapsed_s()
        solves = self.solving.take(evaluation, self.counters, heard_s, published_s)
        logger.info(
            "%s %d (weights %d, %d env steps): greedy mean %.1f over %d episodes%s",
            "confirmation of evaluation" if evaluation.confirmation else "evaluation",
            evaluation.index,
            evaluation.weight_version,
            evaluation.env_steps,
            evaluation.mean,
            evaluation.returns.size,
            ": solved" if solves else "",
        )
        if self._metrics is not None:
            weights_updates = self._weights.updates_behind(evaluation.weight_version)
            # Timed both when the learner heard it and when the weights it played went out.
            self._metrics.write(
                evaluation.record(
                    heard_s, self.counters.updates, weights_updates, solves, published_s
                )
            )

    def _write_progress(self) -> None:
        now = time.monotonic()
        record = self._window.record(
            self.counters,
            self.source.shard_states(),
            self.config.batch_size,
            self._elapsed_s(),
            now - self._last_progress,
            self._context.refusals(),
        )
        self._last_progress = now
        record.update(self._episodes.brief())
        record.update(self._companions_health())
        self._metrics.write(record)
        logger.info("%s", describe_progress(record, self.items))

    def _companions_health(self) -> dict:
        health: dict = {}
        for companion in self.companions:
            health.update(companion())
        return health

    def close(self) -> None:
        self._weights.close()
        self._episodes.close()
        self._context.term()
