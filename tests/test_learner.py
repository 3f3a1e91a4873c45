"""The learner loop in this process: a real double-DQN on a real local prioritized store
(no shards, no subprocesses), its periodic work, and its periodic-task scheduler."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import zmq

from apex.algorithms.dqn.settings import DQNSettings
from apex.algorithms.registry import build_algorithm
from apex.channels import ApexKind, EpisodeReporter
from apex.envs.families import env_shape
from apex.learning.learner import Learner
from apex.learning.metrics import read_metrics
from apex.learning.periodic import Periodic
from apex.learning.staging import DeviceBatch, DeviceStager
from apex.settings import LearnerConfig
from apex.weights import WeightSubscriber
from replay import PrioritizedReplay
from replay.errors import ReplayTimeout
from replay.sampling.batch_math import ReplayBatch
from replay.wire.layout import decode

BATCH = 32


class LocalSource:
    """Batches from one in-process store: what ``replay.sampling.sampler`` gives the learner
    from shards, without sockets."""

    def __init__(self, store: PrioritizedReplay, stage: DeviceStager) -> None:
        self.store = store
        self.stage = stage
        self.updates_sent = 0
        self.started = self.closed = False

    def start(self, cancelled=None, waiting=None) -> bool:
        self.started = True
        return True

    def next_batch(self, timeout_s: float = 10.0) -> DeviceBatch:
        sample = self.store.sample(BATCH, 0.4)
        batch = ReplayBatch(
            sample.transitions,
            sample.weights,
            np.zeros(BATCH, np.int32),
            sample.indices,
            sample.generations,
            sample.priorities,
        )
        return self.stage(batch)

    def update_priorities(self, batch: ReplayBatch, priorities: np.ndarray) -> None:
        assert priorities.shape == (BATCH,) and np.isfinite(priorities).all()
        self.store.update_priorities(batch.indices, batch.generations, priorities)
        self.updates_sent += 1

    def shard_states(self) -> list[dict]:
        info = {
            "size": self.store.size,
            "transitions_added": self.store.items_added,
            "dropped_stale_updates": self.store.dropped_updates,
            "updates_applied": self.updates_sent,
            "senders": {},
        }
        now = time.monotonic()
        return [{"alive": True, "info": info, "info_at": now, "info_asked_at": now}]

    def refresh_infos(self, timeout_s: float = 2.0) -> list[dict]:
        return self.shard_states()

    def close(self) -> None:
        self.closed = True


class StallingSource(LocalSource):
    """From the third batch on, refuses batches for ``stall_s`` (a rate limiter holding
    samples), while an actor reports at every refusal as it would every second."""

    def __init__(self, store, stage, reporter: EpisodeReporter, stall_s: float) -> None:
        super().__init__(store, stage)
        self.reporter, self.stall_s = reporter, stall_s
        self.calls, self.refused = 0, 0
        self._stall_until: float | None = None

    def next_batch(self, timeout_s: float = 10.0) -> DeviceBatch:
        self.calls += 1
        self.reporter.report([], [], 0, 0)
        if self.calls >= 3:
            self._stall_until = self._stall_until or time.monotonic() + self.stall_s
            if time.monotonic() < self._stall_until:
                self.refused += 1
                threading.Event().wait(min(timeout_s, 0.05))  # the sampler's short poll
                raise ReplayTimeout("held by the rate limiter")
        return super().next_batch(timeout_s)


class FillingSource(LocalSource):
    """Shards still filling, which have rejected ``rejected`` insert messages: ``start``
    calls ``waiting`` a few times between polls, as the sampler does, then starts."""

    def __init__(self, store, stage, rejected: int, polls: int = 5) -> None:
        super().__init__(store, stage)
        self.rejected, self.polls = rejected, polls

    def start(self, cancelled=None, waiting=None) -> bool:
        for _ in range(self.polls):
            threading.Event().wait(0.01)
            waiting()
        return super().start(cancelled, waiting)

    def shard_states(self) -> list[dict]:
        [state] = super().shard_states()
        state["info"] = {**state["info"], "rejected_total": self.rejected}
        return [state]


class NeverFillingSource(LocalSource):
    """Shards that never hold enough to sample: ``start`` polls as the sampler does until
    it is cancelled (or, bounded, for ``give_up_s``)."""

    def __init__(self, store, stage, give_up_s: float = 10.0) -> None:
        super().__init__(store, stage)
        self.give_up_s, self.polls = give_up_s, 0

    def start(self, cancelled=None, waiting=None) -> bool:
        deadline = time.monotonic() + self.give_up_s
        while time.monotonic() < deadline and not cancelled.is_set():
            threading.Event().wait(0.01)
            self.polls += 1
            waiting()
        return False


class _Policy:
    """Takes published weights the way an actor's policy does (apex.weights.WeightTaker)."""

    def __init__(self, learner: Learner) -> None:
        self._shapes = {k: tuple(v.shape) for k, v in learner.algorithm.policy.state_dict().items()}
        self.loaded: dict[str, np.ndarray] = {}

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return self._shapes

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        self.loaded = arrays


def filled_store(rng: np.random.Generator) -> PrioritizedReplay:
    spec = env_shape("CartPole-v1").transition_spec()
    store = PrioritizedReplay(spec, 1024, 0.6, rng=0)
    count = 512
    store.add(
        {
            "obs": rng.normal(size=(count, 4)).astype(np.float32),
            "action": rng.integers(0, 2, count),
            "reward": np.ones(count, np.float32),
            "discount": np.full(count, 0.97, np.float32),
            "next_obs": rng.normal(size=(count, 4)).astype(np.float32),
        },
        np.ones(count),
    )
    return store


def make_learner(
    tmp_path: Path,
    store,
    resume_from: Path | None = None,
    **settings,
) -> Learner:
    """A DQN learner on ``store``."""
    config = LearnerConfig(
        **{
            "batch_size": BATCH,
            "hidden": (32, 32),
            "publish_period": 5,
            "eval_every_steps": 0,
            "metrics_interval_s": 1e-6,
            "eval_episodes": 2,
            **settings,
        }
    )
    device = torch.device("cpu")
    sections = {"dqn": DQNSettings(target_update_period=10)}
    algorithm = build_algorithm(config, sections, env_shape(config.env), device)
    source = LocalSource(store, DeviceStager(device))
    return Learner(
        config, algorithm, source, device, tmp_path, {"test": True}, resume_from=resume_from
    )


def test_the_loop_trains_sends_priorities_publishes_and_checkpoints(tmp_path: Path) -> None:
    store = filled_store(np.random.default_rng(0))
    learner = make_learner(tmp_path, store, max_updates=40)
    subscriber_context = zmq.Context()
    subscriber = WeightSubscriber(subscriber_context, learner.weights_endpoint)
    try:
        before = store.total_priority
        outcome = learner.run()
        assert outcome.reason == "max_updates" and not outcome.solved
        assert outcome.counters.updates == 40
        assert learner.source.updates_sent == 40 and learner.source.closed
        assert store.total_priority != before  # |δ| + ε replaced the initial priorities
        assert learner.algorithm.steps == 40
        online, target = learner.algorithm.online, learner.algorithm.target
        # The target was copied at update 40 and the online net has not moved since.
        for a, b in zip(online.parameters(), target.parameters(), strict=True):
            assert torch.equal(a, b)
        # One publication at start, then every 5 updates.
        assert outcome.counters.weight_version == 1 + 40 // 5
        records = [
            json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
        ]
        events = [r["event"] for r in records]
        assert events[0] == "start" and events[-1] == "end" and "progress" in events
        progress = [r for r in records if r["event"] == "progress"]
        assert progress[-1]["replay_sizes"] == [512] and progress[-1]["loss"] is not None
        # The end record holds the run's last figures (apex status and curves.png read
        # them): its updates, time and the transitions the shards took in all.
        end = records[-1]
        assert end["updates"] == 40 and end["train_seconds"] >= progress[-1]["time_s"]
        assert end["transitions_added"] == 512
        assert list((tmp_path / "checkpoints").glob("checkpoint-0000000040.pt"))
        # The end-of-run account read the store's fresh counters (no actor reported).
        assert outcome.delivery["shards_answering"] == 1
        assert outcome.delivery["transitions_lost"] == 0
    finally:
        subscriber.close()
        subscriber_context.term()


def test_resuming_restores_networks_counters_and_the_target_schedule(tmp_path: Path) -> None:
    store = filled_store(np.random.default_rng(1))
    first = make_learner(tmp_path, store, max_updates=15)
    first.run()
    saved = {k: v.clone() for k, v in first.algorithm.online.state_dict().items()}
    checkpoint = next((tmp_path / "checkpoints").glob("*.pt"))
    second = make_learner(tmp_path, store, resume_from=checkpoint, max_updates=25)
    assert second.counters.updates == 15 and second.algorithm.steps == 15
    for name, value in second.algorithm.online.state_dict().items():
        assert torch.equal(value, saved[name])
    outcome = second.run()
    assert outcome.counters.updates == 25


def test_publications_name_the_updates_behind_each_version() -> None:
    """What an evaluation of a version is placed by: the updates made before it went out,
    for the newest ``kept`` versions."""
    from apex.weights import Publications, WeightPublisher

    network = torch.nn.Linear(4, 2)
    context = zmq.Context()
    publications = Publications(WeightPublisher(context), 1.0, kept=3)
    try:
        for version in range(1, 6):
            publications.publish(network, version, updates=10 * version, env_steps=0)
        assert [publications.updates_behind(v) for v in range(1, 7)] == [
            None,
            None,
            30,
            40,
            50,
            None,
        ]
    finally:
        publications.close()
        context.destroy(linger=0)


def test_periodic_checkpoints_carry_the_training_time_so_far(tmp_path: Path) -> None:
    from apex.learning import checkpoint

    store = filled_store(np.random.default_rng(3))
    learner = make_learner(tmp_path, store, max_updates=60, checkpoint_interval_s=1e-6)
    learner.run()
    paths = sorted((tmp_path / "checkpoints").glob("checkpoint-*.pt"))
    assert len(paths) >= 2  # periodic ones, then the final one
    seconds = [json.loads(checkpoint.load(p)["counters"])["train_seconds"] for p in paths]
    # A learner killed after any of them resumes with its time budget spent so far.
    assert all(s > 0 for s in seconds) and seconds == sorted(seconds)
    assert seconds[-1] == pytest.approx(learner.counters.train_seconds)


def test_a_damaged_newest_checkpoint_gives_way_to_the_one_before(tmp_path: Path) -> None:
    from apex.learning import checkpoint

    store = filled_store(np.random.default_rng(4))
    make_learner(tmp_path, store, max_updates=30, checkpoint_interval_s=1e-6).run()
    paths = sorted((tmp_path / "checkpoints").glob("checkpoint-*.pt"))
    newest = paths[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a full disk
    found, refused = checkpoint.latest_readable(tmp_path / "checkpoints")
    assert found == paths[-2]
    assert len(refused) == 1 and newest.name in refused[0]
    # What the resume says on the console: the checkpoint skipped and what it lost.
    from launch.local.resume import TrainedSoFar

    so_far = TrainedSoFar.read(tmp_path)
    lost = int(newest.stem.split("-")[1]) - so_far.updates
    assert so_far.checkpoint == found and lost > 0
    assert f"1 newer checkpoint(s) unreadable, {lost:,} updates lost with them (" in (
        so_far.describe()
    )
    resumed = make_learner(tmp_path, store, resume_from=found, max_updates=40)
    try:
        assert 0 < resumed.counters.updates < 30
    finally:
        resumed.source.close()
        resumed.close()


def test_a_stop_request_ends_the_run_with_a_final_checkpoint(tmp_path: Path) -> None:
    learner = make_learner(tmp_path, filled_store(np.random.default_rng(2)))
    learner.stop()
    outcome = learner.run()
    assert outcome.reason == "stopped" and outcome.counters.updates == 0
    assert list((tmp_path / "checkpoints").glob("checkpoint-*.pt"))
    assert learner.source.closed


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_periodic_tasks_run_on_their_own_period_and_may_stop_the_loop() -> None:
    clock, ran = FakeClock(), []
    tasks = Periodic(clock)
    tasks.every("each", lambda: ran.append("each"))
    tasks.every("seconds", lambda: ran.append("seconds"), seconds=2.0)
    tasks.every("updates", lambda: ran.append("updates"), updates=3, start_updates=1)
    tasks.every("stop", lambda: clock.now >= 5.0, seconds=1.0)
    for update in range(1, 8):
        clock.now = float(update)
        stopped = tasks.run_due(update)
        if stopped:
            break
    assert stopped == "stop" and update == 5
    assert ran.count("each") == 5
    assert ran.count("seconds") == 2  # at 2 s and 4 s
    assert ran.count("updates") == 1  # at update 4
    with pytest.raises(ValueError, match="periods must be > 0"):
        tasks.every("bad", lambda: None, seconds=0.0)


@pytest.mark.slow
def test_actors_are_heard_while_the_learner_waits_for_a_batch(tmp_path: Path) -> None:
    """A learner held by the rate limiter for 3 s still takes the actors' reports: an actor
    that kept reporting is not counted silent for the wait."""
    store = filled_store(np.random.default_rng(3))
    learner = make_learner(tmp_path, store, max_updates=10)
    context = zmq.Context()
    reporter = EpisodeReporter(context, learner.episodes_endpoint, sender=7)
    learner.source = source = StallingSource(store, learner.source.stage, reporter, 3.0)
    try:
        outcome = learner.run()
        assert outcome.reason == "max_updates" and source.refused >= 10
        actor = outcome.delivery["actors"]["7"]
        assert actor["longest_silence_s"] < 1.5, actor
    finally:
        reporter.close()
        context.destroy(linger=0)


@pytest.mark.slow
def test_weights_sent_again_while_waiting_carry_the_updates_of_their_version(
    tmp_path: Path,
) -> None:
    """Held by the rate limiter two updates after its first publication (publishing every
    5), the learner sends weights again each second. Those it has trained since go as a
    new version: every message's version was published after the very updates the
    message says (the header's count), so a version names one set of parameters."""
    store = filled_store(np.random.default_rng(4))
    learner = make_learner(tmp_path, store, max_updates=10)
    context = zmq.Context()
    reporter = EpisodeReporter(context, learner.episodes_endpoint, sender=7)
    learner.source = StallingSource(store, learner.source.stage, reporter, 2.5)
    subscriber = context.socket(zmq.SUB)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(learner.weights_endpoint)
    heard: list[tuple[int, int]] = []
    ended: list[ApexKind] = []
    running = threading.Event()
    running.set()

    def listen() -> None:
        while running.is_set():
            if subscriber.poll(50):
                message = decode(subscriber.recv_multipart(copy=False), ApexKind)
                if message.kind == ApexKind.WEIGHTS:  # not the run's end, said after them
                    heard.append((message.policy_version, message.count))
                else:
                    ended.append(message.kind)

    listener = threading.Thread(target=listen)
    listener.start()
    try:
        outcome = learner.run()
    finally:
        running.clear()
        listener.join(timeout=10)
        subscriber.close(linger=0)
        reporter.close()
        context.destroy(linger=0)
    assert outcome.reason == "max_updates"
    assert ended and set(ended) == {ApexKind.RUN_ENDED}  # the run is over: actors stop
    during_wait = [(version, count) for version, count in heard if count == 2]
    assert len(during_wait) >= 2, heard  # sent, then sent again while held
    assert {version for version, _ in during_wait} == {2}, heard
    for version, count in heard:
        assert learner._weights.updates_behind(version) == count, (version, count, heard)


def test_a_held_back_subscriber_loads_weights_only_every_so_many_versions() -> None:
    """actor.refresh_versions: weights at least K versions newer than those held, or none
    (the policy-lag study); the first weights to arrive always load."""
    from apex.algorithms.networks import DuelingMLP
    from apex.algorithms.policy import NumpyDuelingMLP
    from apex.weights import WeightPublisher

    context = zmq.Context()
    try:
        publisher = WeightPublisher(context, "127.0.0.1", 0)
        subscriber = WeightSubscriber(context, publisher.endpoint, every_versions=4)
        network, policy = DuelingMLP(4, 2, (8,)), NumpyDuelingMLP(4, 2, (8,), 0)
        loaded, version, deadline = [], 0, time.monotonic() + 30
        # A PUB keeps one message per subscriber (WEIGHTS_HWM): some publications are
        # never read, so the rule shows in the gaps between the versions loaded.
        while len(loaded) < 4:
            assert time.monotonic() < deadline, f"loaded only {loaded}"
            version += 1
            publisher.publish(network, version)
            if subscriber.poll(policy, timeout_ms=20):
                loaded.append(subscriber.version)
        assert subscriber.received > 0 and subscriber.loaded == len(loaded)
        assert all(b - a >= 4 for a, b in itertools.pairwise(loaded)), loaded
        assert subscriber.stale > 0
        publisher.close()
        subscriber.close()
    finally:
        context.destroy(linger=0)


def test_a_restarted_learner_s_weights_load_though_its_versions_resumed_lower() -> None:
    """A learner resumed from its checkpoint publishes versions from there, below those
    the actors may hold; its count of updates starts again at 0, which says so."""
    from apex.algorithms.networks import DuelingMLP
    from apex.algorithms.policy import NumpyDuelingMLP
    from apex.weights import WeightPublisher

    context = zmq.Context()
    try:
        publisher = WeightPublisher(context, "127.0.0.1", 0)
        subscriber = WeightSubscriber(context, publisher.endpoint)
        network, policy = DuelingMLP(4, 2, (8,)), NumpyDuelingMLP(4, 2, (8,), 0)

        def deliver(version: int, trained: int) -> None:
            received, deadline = subscriber.received, time.monotonic() + 30
            while subscriber.received == received:  # a PUB may drop one: send until read
                assert time.monotonic() < deadline, "the publication never arrived"
                publisher.publish(network, version, trained=trained)
                subscriber.poll(policy, timeout_ms=20)

        deliver(50, 70)
        assert (subscriber.version, subscriber.trained) == (50, 70)
        deliver(40, 75)  # the same life, an older version: stale
        assert subscriber.version == 50 and subscriber.stale >= 1
        deliver(45, 0)  # a new life: its first weights, before it trains
        assert (subscriber.version, subscriber.trained) == (45, 0)
        assert subscriber.learner_restarts == 1
        deliver(46, 1)
        assert (subscriber.version, subscriber.trained, subscriber.loaded) == (46, 1, 3)
        publisher.close()
        subscriber.close()
    finally:
        context.destroy(linger=0)


def test_while_the_shards_fill_the_learner_says_how_far_they_are_and_what_they_rejected(
    tmp_path: Path,
) -> None:
    """Before its first update the learner writes what the shards hold and what they
    rejected; a run that cannot fill (every insert refused) says so in its line and in
    ``apex status``'s faults instead of only waiting."""
    from launch.views.status import run_status, status_lines
    from launch.views.watch import RunWatch

    store = filled_store(np.random.default_rng(5))
    learner = make_learner(tmp_path, store, max_updates=2)
    learner.source = FillingSource(store, learner.source.stage, rejected=75)
    (tmp_path / "config.json").write_text(json.dumps({"replay": {"min_size": 1000}}))
    assert learner.run().reason == "max_updates"
    records = read_metrics(tmp_path)
    waiting = [r for r in records if r["event"] == "waiting"]
    assert len(waiting) == 5, records  # a poll each (metrics every 1 µs here)
    assert all(r["replay_size"] == 512 and r["rejected_total"] == 75 for r in waiting)
    first_progress = next(i for i, r in enumerate(records) if r["event"] == "progress")
    assert all(records.index(r) < first_progress for r in waiting)
    watch = RunWatch(tmp_path)
    watch.poll()
    watch.progress = None  # as the line reads before the first progress record
    expected = (
        "waiting for replay to fill: 512 of 1,000 transitions; the shards rejected 75 "
        "insert messages (their logs say why)"
    )
    assert watch.filling() == expected
    status = run_status(tmp_path)
    assert status["faults"]["insert_messages_rejected"] == 75
    assert any("insert_messages_rejected 75" in line for line in status_lines(status))


def test_the_time_limit_ends_a_run_whose_shards_never_fill(tmp_path: Path) -> None:
    """``--max-time`` bounds the wait for data too: a run whose replay never reaches its
    ``min_size`` ends at its limit, with its final checkpoint, instead of waiting on."""
    store = filled_store(np.random.default_rng(6))
    learner = make_learner(tmp_path, store, max_time_s=0.2)
    learner.source = source = NeverFillingSource(store, learner.source.stage)
    outcome = learner.run()
    assert outcome.reason == "max_time" and outcome.counters.updates == 0
    assert source.polls < 100  # 0.2 s of 10-ms polls, not the 10-s bound
    assert list((tmp_path / "checkpoints").glob("checkpoint-*.pt"))
    [end] = [r for r in read_metrics(tmp_path) if r["event"] == "end"]
    assert end["reason"] == "max_time" and end["updates"] == 0


def test_intake_is_never_negative_when_a_shard_comes_back_from_a_snapshot() -> None:
    from apex.learning.progress import LearnerCounters, ProgressWindow

    window = ProgressWindow()

    def states(*added: int) -> list[dict]:
        return [
            {
                "alive": True,
                "info": {
                    "transitions_added": a,
                    "size": a,
                    "senders": {},
                    "dropped_stale_updates": 0,
                    "updates_applied": 0,
                },
            }
            for a in added
        ]

    counters = LearnerCounters()
    assert window.record(counters, states(1000, 2000), 32, 1.0, 1.0)["transitions_per_s"] is None
    # Shard 1 killed and restored from a snapshot holding fewer than it had said.
    assert window.record(counters, states(1500, 800), 32, 2.0, 1.0)["transitions_per_s"] == 500
    assert window.record(counters, states(1600, 1000), 32, 3.0, 2.0)["transitions_per_s"] == 150
