"""The Ape-X actor: k environments, one batched forward pass per step, n-step transitions
with priorities computed from the actor's own network, pushed to the replay shards.

Per step: the acting policy's actions for all k envs in one forward pass, each env copy
exploring with its own fixed scale (ε-greedy for DQN, Gaussian noise σ_i for DPG, spread
over the run's copies as in Ape-X); the vector env steps (SAME_STEP autoreset; an ALE
game's envs may step in groups that take turns, ``apex.acting.env_group``); the n-step builder
emits finished transitions. Once ``insert_batch`` transitions are ready they get
initial priorities ``|TD| + priority_epsilon`` from the actor's copy of the network (Ape-X
computes them actor-side so that the learner never sees unprioritized data), and go to a
shard stamped with the policy version the actor acted with. What the policy is and how it
explores is the algorithm's (``apex.algorithms.protocols.Acting``); this loop is the same for
every algorithm. Every ``weight_refresh_steps`` vector steps the actor loads the newest
weights that the learner published.

A copy of its env that fails costs its episode, not the actor (``apex.envs.guard``,
``apex.acting.env_group``): its faults are counted by kind and reported with every
heartbeat. A step that hangs is found by the watchdog (``apex.envs.watchdog``)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from apex.acting.env_group import make_groups
from apex.algorithms.exploration import env_epsilons
from apex.algorithms.protocols import Acting
from apex.channels import HEARTBEAT_S, STUCK_AFTER_S, EpisodeReporter
from apex.envs.families import env_shape
from apex.envs.guard import FaultTally
from apex.envs.watchdog import StepWatchdog
from apex.settings import ActorConfig
from apex.weights import WeightSubscriber
from replay.errors import ReplayTimeout
from replay.inserts.client import InsertClient
from replay.inserts.endpoints import ShardEndpoints
from replay.wire.security import SecurityConfig, make_context

# At its end an actor waits this long for the shards to confirm what it sent.
FLUSH_TIMEOUT_S = 5.0
# Weights are read at least this often (and every weight_refresh_steps vector steps).
WEIGHTS_POLL_S = 0.05
# A lock-step actor that has had no trained weights for this long sends its next round
# anyway: a learner that died and restarted lost the round it was to train on, and the
# new one waits for data while the actor waits for weights.
LOCKSTEP_PATIENCE_S = 10.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorEndpoints:
    shards: tuple[ShardEndpoints, ...]
    weights: str
    episodes: str


class Actor:
    """One actor; construct it in the process that runs it, then call :meth:`run`.

    Args:
        config: its settings.
        acting: what it acts with, and the algorithm and settings that is for
            (``launch.builder.actor`` makes it with ``apex.algorithms.registry.build_acting``).
        endpoints: the shards' and the learner's.
        security: the run's keys; with keys, it takes weights only from a publisher that
            proves it holds the run's server secret.

    Raises:
        KeysError: the keys cannot be used.
    """

    def __init__(
        self,
        config: ActorConfig,
        acting: Acting,
        endpoints: ActorEndpoints,
        security: SecurityConfig | None = None,
    ) -> None:
        self.config = config
        shape = env_shape(config.env)
        self._shape = shape
        self._policy = acting.policy
        self._symbol = acting.builder.exploration_symbol
        self._spec = acting.transition_spec(shape, config)
        # Each env copy's exploration scale (ε, or DPG's noise σ), spread over the run; a
        # policy that explores by itself (IMPALA's) acts at scale 1 everywhere.
        self._scales = np.ones(config.envs_per_actor)
        scale = acting.exploration_scale()
        if scale is not None:
            self._scales = env_epsilons(
                config.actor_index,
                config.actor_count,
                config.envs_per_actor,
                scale,
                config.epsilon_alpha,
            )
        self._rng = np.random.default_rng(config.actor_seed)
        self._context = make_context(security, need_server_secret=False)
        self._weights = WeightSubscriber(self._context, endpoints.weights, config.refresh_versions)
        self._episodes = EpisodeReporter(self._context, endpoints.episodes, config.actor_index)
        self._endpoints = endpoints
        self._inserts = InsertClient(
            self._context,
            endpoints.shards,
            sender=config.actor_index,
            spec=self._spec,
            timeout_s=config.insert_timeout_s,
            start_timeout_s=config.shard_start_timeout_s,
            batch_hint=config.insert_batch,
            credit=config.insert_credit,
            reroute_after_s=config.reroute_after_s,
        )
        self._frames: FrameWriter | None = None
        if self._inserts.frames is not None:
            from apex.acting.frame_writer import FrameWriter  # numba's kernels: frame actors only

            layout, steps = self._inserts.frame_layout, self._inserts.frames.steps
            # Frames a stream makes between sends: a step's, or an unroll's (two a step
            # at worst, where every step ends an episode) for each round a send waits.
            history = config.insert_batch + 8
            if steps is not None:
                per_round = config.envs_per_actor // config.env_groups
                rounds = -(-config.insert_batch // per_round) + 1
                history = 2 * steps * rounds + 8
            self._frames = FrameWriter(
                config.envs_per_actor,
                layout["stack"],
                config.n_step,
                history=history,
                compress=layout["compressed"],
                rng=np.random.default_rng(),
                frame_shape=self._inserts.frames.frame_shape,
                unroll_steps=steps,
            )
        self._faults = FaultTally()
        self._groups = make_groups(
            config,
            shape,
            acting,
            self._frames,
            lambda: self._weights.version,
            self._scales,
            faults=self._faults,
        )
        # Priorities depend on the policy only: any group's maker gives them.
        self._maker = self._groups[0].maker
        self._stop = threading.Event()
        self.steps = 0
        self.transitions_sent = 0
        self.episodes_finished = 0
        self.insert_waits = 0
        self.lockstep_wait_s = 0.0
        self.lockstep_timeouts = 0
        self._lane_resets: dict[int, int] = {}
        self._delivery: dict[str, int] = {}  # as last reported, for the watchdog's beats
        self._watchdog: StepWatchdog | None = None

    def stop(self) -> None:
        """Asks :meth:`run` to return after its current step (safe from a signal handler)."""
        self._stop.set()

    def _done(self) -> bool:
        """Asked to stop, or the learner said its run is over (``WeightPublisher.end_run``)."""
        return self._stop.is_set() or self._weights.run_ended

    def run(self) -> None:
        config = self.config
        logger.info(
            "actor %d: %d × %s, %s %.4g to %.4g (Ape-X actors %d, %d, ... of %d)",
            config.actor_index,
            config.envs_per_actor,
            config.env,
            self._symbol,
            self._scales.max(),
            self._scales.min(),
            config.actor_index,
            config.actor_index + config.actor_count,
            config.actor_count * config.envs_per_actor,
        )
        watchdog = self._watchdog = StepWatchdog(
            config.step_timeout_s,
            self._stuck_beats(),
            stuck_after_s=STUCK_AFTER_S,
            beat_every_s=HEARTBEAT_S,
        )
        watchdog.stepping()
        for group in self._groups:
            group.begin(config.actor_seed)
        watchdog.stepped()
        pending: list[dict[str, np.ndarray]] = []
        pending_count = 0
        started = next_weights_poll = time.monotonic()
        try:
            self._weights.poll(self._policy, timeout_ms=0)
            for group in self._groups:  # each group's first step plays meanwhile
                group.act(self._rng)
            while not self._done():
                if config.max_steps is not None and self.steps >= config.max_steps:
                    break
                now = time.monotonic()
                # A lock-step actor loads weights only between its rounds (_await_update).
                due = self.steps % config.weight_refresh_steps == 0 or now >= next_weights_poll
                if due and not config.lockstep:
                    # Also by time: a vector step of many envs takes a while, and what
                    # waits in the socket gets older the longer it is not read.
                    self._weights.poll(self._policy)
                    next_weights_poll = now + WEIGHTS_POLL_S
                for group in self._groups:
                    watchdog.stepping()
                    done = group.finish()
                    watchdog.stepped()
                    if done.experience is not None:
                        pending.append(done.experience)
                        pending_count += len(done.experience["action"])
                    if done.returns:
                        self._report(done.returns, done.lengths)
                        self.episodes_finished += len(done.returns)
                    elif self._episodes.heartbeat_due():
                        self._report([], [])
                    if config.lockstep and pending:
                        # The round's unrolls go at once, and the next step waits for the
                        # weights trained on them.
                        loads = self._weights.loaded
                        self._send(pending)
                        pending, pending_count = [], 0
                        self._await_update(loads)
                    # The next step plays while the other groups finish theirs and while
                    # this batch goes out.
                    group.act(self._rng)
                    if pending_count >= config.insert_batch:
                        self._send(pending)
                        pending, pending_count = [], 0
                self.steps += 1
        finally:
            elapsed = max(time.monotonic() - started, 1e-9)
            logger.info(
                "actor %d stopping: %d vector steps (%.0f env steps/s), %d transitions, "
                "%d episodes, policy version %d%s%s",
                config.actor_index,
                self.steps,
                self.steps * config.envs_per_actor / elapsed,
                self.transitions_sent,
                self.episodes_finished,
                self._weights.version,
                f", {self.lockstep_wait_s / elapsed:.0%} of the time waiting for the learner"
                if config.lockstep
                else "",
                "; the learner said the run is over" if self._weights.run_ended else "",
            )
            self.close()

    def _send(self, parts: list[dict[str, np.ndarray]]) -> None:
        batch = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        batch, priorities = self._maker.priorities(batch, self.config.priority_epsilon)
        # Shards push back (rate limiter, full queues): wait, but keep seeing the stop flag.
        while not self._done():
            try:
                self._insert(batch, priorities)
            except ReplayTimeout:
                self.insert_waits += 1
                if self.insert_waits == 1:
                    logger.info(
                        "actor %d: shards are not taking data yet; waiting", self.config.actor_index
                    )
                # Alive while it waits: the learner must not count a blocked actor as gone.
                if self._episodes.heartbeat_due():
                    self._report([], [])
                # And current: what it makes once the shards take data again should come
                # from the newest weights, not from those it had when it blocked (a
                # lock-step actor's come once the learner has trained on its round).
                if not self.config.lockstep:
                    self._weights.poll(self._policy)
                continue
            self.transitions_sent += len(priorities)
            return

    def _await_update(self, loads: int) -> None:
        """Waits (seeing the stop flag, reporting as alive) until weights load that the
        learner published after an update (``loads``: the loads before the round was
        sent): with one update a publication (``learner.publish_period = 1``), after it
        trained on the round. A learner's first weights, published before it trains, do
        not count: an actor let go by them would stay a round ahead for good. A restarted
        learner's do (the round went with the old one), and so do LOCKSTEP_PATIENCE_S
        without any, for a restart whose first weights did not arrive."""
        weights = self._weights
        started, restarts = time.monotonic(), weights.learner_restarts
        while not self._done() and (weights.loaded == loads or not weights.trained):
            if weights.learner_restarts != restarts:
                break  # a new learner, which never had the round: the next one goes
            if time.monotonic() - started > LOCKSTEP_PATIENCE_S:
                self.lockstep_timeouts += 1
                logger.warning(
                    "actor %d: no trained weights for %.0f s (a restarted "
                    "learner?): sending the next round anyway (%d so far)",
                    self.config.actor_index,
                    LOCKSTEP_PATIENCE_S,
                    self.lockstep_timeouts,
                )
                break
            weights.poll(self._policy, timeout_ms=int(WEIGHTS_POLL_S * 1000))
            if self._episodes.heartbeat_due():
                self._report([], [])
        self.lockstep_wait_s += time.monotonic() - started

    def _insert(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        version = self._weights.version
        if self._frames is None:
            self._inserts.insert(batch, priorities, policy_version=version)
            return
        scalars = {name: batch[name] for name in self._inserts.frames.scalars}
        for index, resets in enumerate(self._inserts.lane_resets()):
            if resets != self._lane_resets.get(index, 0):
                self._lane_resets[index] = resets
                self._frames.forget(index)
        shard, insert = self._inserts.insert_frames(
            lambda index: self._frames.build(index, batch["refs"], scalars, priorities),
            policy_version=version,
        )
        self._frames.sent_to(shard, insert)

    def _report(self, returns: list[float], lengths: list[int], final: bool = False) -> None:
        """Episodes (or none: a heartbeat) and what this actor handed to the replay."""
        self._delivery = self._inserts.delivery()
        self._episodes.report(
            returns,
            lengths,
            self._weights.version,
            self.transitions_sent,
            self._delivery,
            final=final,
            env_steps=self.steps * self.config.envs_per_actor,
            faults=self.faults(),
        )

    def faults(self, stuck_s: float = 0.0) -> dict:
        """Its env copies' faults (``apex.channels.ACTOR_COUNTS``' fault counts)."""
        return {
            "env_faults": self._faults.total,
            "env_steps_dropped": sum(group.steps_dropped for group in self._groups),
            "items_dropped": sum(group.maker.discarded for group in self._groups),
            "stuck_s": int(stuck_s),
            "kinds": self._faults.summary(),
        }

    def _stuck_beats(self):
        """The watchdog's heartbeat: on its thread, so on a socket of its own, as this
        actor's life (its incarnation)."""
        reporter = EpisodeReporter(self._context, self._endpoints.episodes, self.config.actor_index)
        reporter.incarnation = self._episodes.incarnation
        self._stuck_reporter = reporter

        def beat(age_s: float) -> None:
            reporter.report(
                [],
                [],
                self._weights.version,
                self.transitions_sent,
                self._delivery,
                env_steps=self.steps * self.config.envs_per_actor,
                faults=self.faults(age_s),
            )

        return beat

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()
            self._stuck_reporter.close(linger_s=0)
        for group in self._groups:
            group.close()
        # What the shards have not confirmed yet is sent again if they lost it; what is
        # still unconfirmed after this is reported as the actor's last word.
        if not self._inserts.flush(FLUSH_TIMEOUT_S):
            logger.warning(
                "actor %d: stopping with %s", self.config.actor_index, self._inserts.delivery()
            )
        self._report([], [], final=True)
        counts = self._weights.counts()
        if counts["weights_rejected"]:
            logger.warning("actor %d: weights %s", self.config.actor_index, counts)
        self._inserts.close(linger_s=1.0)
        self._episodes.close()
        self._weights.close()
        self._context.term()
