"""A user's env copy that raises, returns non-finite values or hangs: the copy is made
again, the step is dropped with every item that holds it, the evaluator plays the episode
again, the watchdog names the hang; each fault counted by kind (``apex.envs.guard``,
``apex.acting.env_group``, ``apex.envs.watchdog``)."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from apex.algorithms.impala.unrolls import UnrollBuilder
from apex.algorithms.nstep import NStepBuilder
from apex.algorithms.r2d2.sequences import SequenceBuilder
from apex.channels import STUCK_AFTER_S, ApexKind, EpisodeReporter, read_episodes
from apex.envs.guard import (
    IN_STEP,
    RESET_FAULTS,
    STEP_FAULT,
    EnvCopyBroken,
    FaultTally,
    GuardedCopy,
)
from apex.envs.stepping import vector_env
from apex.envs.watchdog import StepWatchdog
from apex.learning.evaluation import play_greedy
from replay.errors import ProtocolError
from replay.wire.layout import Message

LENGTH = 10  # the counting env's episodes


class Counting(gym.Env):
    """Observation: the step count; reward 1 a step; terminates after LENGTH steps. Its
    steps listed in ``raise_at`` raise, those in ``nan_at`` give NaN; ``reset_fails``
    resets raise first."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, raise_at=(), nan_at=(), reset_fails=0) -> None:
        self.raise_at, self.nan_at, self.reset_fails = set(raise_at), set(nan_at), reset_fails
        self.t = 0

    def reset(self, *, seed=None, options=None):
        if self.reset_fails:
            self.reset_fails -= 1
            raise OSError("the simulator's licence server did not answer")
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t in self.raise_at:
            raise RuntimeError(f"solver diverged\nat step {self.t}")
        value = np.nan if self.t in self.nan_at else float(self.t)
        return np.array([value], np.float32), 1.0, self.t >= LENGTH, False, {}


class Maker:
    """Makes ``Counting`` copies: the first with ``first``'s faults, the others clean."""

    def __init__(self, **first) -> None:
        self.first, self.made = first, 0

    def __call__(self) -> Counting:
        self.made += 1
        return Counting(**self.first) if self.made == 1 else Counting()


def test_a_step_that_raises_comes_back_truncated_on_a_new_copy() -> None:
    maker = Maker(raise_at={3})
    copy = GuardedCopy(maker)
    copy.reset(seed=0)
    copy.step(0), copy.step(0)
    observation, reward, terminated, truncated, info = copy.step(0)
    assert (observation.tolist(), reward, terminated, truncated) == ([2.0], 0.0, False, True)
    assert info == {STEP_FAULT: "RuntimeError: at step 3"}  # the type and the last line
    assert maker.made == 2
    assert copy.reset()[0].tolist() == [0.0] and copy.step(0)[0].tolist() == [1.0]
    assert not IN_STEP  # out of every step


def test_a_non_finite_step_is_truncated_on_the_same_copy() -> None:
    maker = Maker(nan_at={2})
    copy = GuardedCopy(maker)
    copy.reset()
    copy.step(0)
    observation, _, _, truncated, info = copy.step(0)
    assert observation.tolist() == [1.0] and truncated
    assert info == {STEP_FAULT: "non-finite observation"} and maker.made == 1


def test_a_reset_that_fails_is_tried_on_new_copies_until_too_many_fail() -> None:
    makes = iter([Counting(reset_fails=1), Counting()])
    copy = GuardedCopy(lambda: next(makes))
    observation, info = copy.reset(seed=5)
    assert observation.tolist() == [0.0]
    assert info[RESET_FAULTS] == "OSError: the simulator's licence server did not answer"
    broken = GuardedCopy(lambda: Counting(reset_fails=1))
    with pytest.raises(EnvCopyBroken, match=r"failed 5 times in a row.*licence server"):
        broken.reset()


def test_a_dropped_step_takes_the_pending_n_step_windows_of_its_env_only() -> None:
    builder = NStepBuilder(2, 3, 0.5, (1,), np.dtype(np.float32))
    made = []
    for t in range(1, 6):
        observations = np.array([[t], [t]], np.float32)
        dropped = np.array([t == 4, False])
        out = builder.step(
            observations,
            np.zeros(2, np.int64),
            np.ones(2),
            observations + 1,
            np.zeros(2, bool),
            dropped,
            dropped,
        )
        made.append(out["obs"][:, 0].tolist())
    # Env 0's windows starting at 2, 3, 4 held step 4; its window from 1 ended at 3.
    assert made == [[], [], [1.0, 1.0], [2.0], [3.0]]
    assert builder.discarded == 3


def test_a_dropped_step_leaves_its_env_out_of_the_unrolls() -> None:
    builder = UnrollBuilder(3, 2, 0.9, (1,), np.dtype(np.float32))
    step = dict(
        actions=np.zeros(3, np.int64),
        rewards=np.ones(3),
        next_observations=np.ones((3, 1), np.float32),
        terminated=np.zeros(3, bool),
        log_probs=np.zeros(3),
    )
    dropped = np.array([False, True, False])
    first = builder.step(np.zeros((3, 1), np.float32), truncated=dropped, dropped=dropped, **step)
    unrolls = builder.step(np.ones((3, 1), np.float32), truncated=np.zeros(3, bool), **step)
    assert first is None and unrolls["obs"].shape == (2, 3, 1) and builder.discarded == 1
    again = [
        builder.step(np.ones((3, 1), np.float32), truncated=np.zeros(3, bool), **step)
        for _ in range(2)
    ]
    assert again[1]["obs"].shape == (3, 3, 1)  # the next unroll of that env is whole


def test_a_dropped_step_sends_no_sequence_that_holds_it() -> None:
    builder = SequenceBuilder(2, 4, 2, 0.9, (1,), np.dtype(np.float32), (2, 3))
    sent = []
    for t in range(6):
        dropped = np.array([t == 3, False])
        out = builder.step(
            np.full((2, 1), t, np.float32),
            np.zeros((2, 2, 3), np.float32),
            np.zeros(2, np.int64),
            np.ones(2),
            np.zeros((2, 1), np.float32),
            np.zeros((2, 1), np.float32),
            np.zeros(2, bool),
            dropped,
            dropped=dropped,
        )
        sent.append(0 if out is None else len(out["obs"]))
    assert sent == [0, 0, 0, 1, 0, 1] and builder.discarded == 1


@pytest.mark.parametrize("stepping", ["serial", "threads", "processes"])
def test_every_stepping_reports_a_copy_s_fault_where_the_tally_reads_it(stepping) -> None:
    envs = vector_env(
        [lambda: GuardedCopy(Maker(raise_at={4}))] * 1 + [lambda: GuardedCopy(Maker(nan_at={6}))],
        stepping,
        gym.vector.AutoresetMode.SAME_STEP,
    )
    tally = FaultTally()
    try:
        tally.take(envs.reset(seed=0)[1])
        faulted = [tally.take(envs.step(np.zeros(2, np.int64))[4]) for _ in range(7)]
    finally:
        envs.close()
    steps = {t: mask.tolist() for t, mask in enumerate(faulted, 1) if mask is not None}
    assert steps == {4: [True, False], 6: [False, True]}
    assert tally.summary() == {
        "RuntimeError": [1, "RuntimeError: at step 4"],
        "non-finite": [1, "non-finite observation"],
    }


def test_an_evaluation_plays_a_faulted_episode_again_and_counts_it() -> None:
    class Constant:
        def initial_state(self, envs):
            return None

        def begin_episodes(self, state, envs):
            pass

        def explore(self, observations, scales, rng, state):
            return np.zeros(len(observations), np.int64)

    envs = vector_env([lambda: GuardedCopy(Maker(raise_at={4})), lambda: GuardedCopy(Maker())])
    tally = FaultTally()
    try:
        returns = play_greedy(Constant(), envs, seed=0, faults=tally)
    finally:
        envs.close()
    assert returns.tolist() == [LENGTH, LENGTH] and tally.replayed == 1 and tally.total == 1


def test_an_actor_s_faults_travel_by_kind_and_a_garbled_summary_is_refused(context) -> None:
    import zmq

    pull = context.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    reporter = EpisodeReporter(context, f"tcp://127.0.0.1:{port}", 3)
    kinds = {"RuntimeError": [2, "RuntimeError: at step 4"]}
    reporter.report(
        [], [], 0, 10, faults={"env_faults": 2, "items_dropped": 5, "stuck_s": 7, "kinds": kinds}
    )
    assert pull.poll(5000)
    from replay.wire.layout import decode

    message = decode(pull.recv_multipart(copy=False), ApexKind)
    _, _, counts, read = read_episodes(message)
    assert read == kinds and counts[6] == 2 and counts[8] == 5 and counts[9] == 7
    garbled = Message(
        ApexKind.EPISODES,
        3,
        1,
        0,
        0,
        0.0,
        (*message.arrays[:3], np.frombuffer(b"{not json", np.uint8)),
    )
    with pytest.raises(ProtocolError, match="not JSON"):
        read_episodes(garbled)
    reporter.close(0)
    pull.close(0)


def test_the_watchdog_says_stuck_then_names_the_copy_that_hung() -> None:
    beats: list[float] = []
    hung = threading.Event()
    reasons: list[str] = []
    watchdog = StepWatchdog(
        STUCK_AFTER_S + 1.0, beats.append, lambda reason: (reasons.append(reason), hung.set())
    )
    IN_STEP[1] = (5, "step", time.monotonic())
    try:
        watchdog.stepping()
        assert hung.wait(10.0)
    finally:
        IN_STEP.pop(1)
        watchdog.close()
    assert beats and min(beats) >= STUCK_AFTER_S
    assert reasons[0].startswith("env copy 5 in step hung for 3 s (actor.step_timeout_s = 3)")


@pytest.mark.slow
def test_a_chaotic_simulator_trains_to_a_confirmed_solve_with_every_fault_counted(
    tmp_path,
) -> None:
    """CartPole whose steps raise (0.1%), give NaN (0.1%) and one of which hangs: the run
    solves, the hung actor is found within its timeout and restarted, each fault is counted
    by kind, and no shard refuses a row."""
    import json

    from apex.learning.metrics import read_metrics
    from launch.api import train

    lines: list[str] = []
    config = {
        "env": {
            "id": "bench.faults.faulty_envs:ChaoticCartPole-v0",
            "kwargs": {"raise_rate": 0.001, "nan_rate": 0.001, "marker": str(tmp_path / "hung")},
        },
        "actor": {"step_timeout_s": 5.0},
        "learner": {"max_time_s": 120.0},
    }
    summary = train(config, run_dir=tmp_path / "run", echo=lines.append)
    assert summary["solved"] and summary["exit_code"] == 0, lines[-3:]
    assert summary["actor_restarts"] == 1 and summary["actor_hangs"] == 1, summary
    hung = next(line for line in lines if "hung" in line)
    assert "actor 0 ended: an env step hung (exit code 4): EnvHung: env copy" in hung, hung
    assert "(actor.step_timeout_s = 5)" in hung
    delivery = summary["outcome"]["delivery"]
    kinds = delivery["env_fault_kinds"]
    assert set(kinds) == {"RuntimeError", "non-finite"}, kinds
    assert kinds["RuntimeError"][1] == "RuntimeError: solver state: diverged"
    assert delivery["env_faults"] == sum(count for count, _ in kinds.values()) > 0
    assert delivery["items_dropped"] >= delivery["env_faults"]
    records = read_metrics(tmp_path / "run")
    assert all(
        not shard["rejected_total"]
        for r in records
        if r.get("event") == "progress"
        for shard in r["shards"]
    )
    end = next(line for line in lines if line.startswith("solved in"))
    assert "env faults" in end and "(1 hung)" in end, end
    # The agent that solved is the agent kept, and apex evaluate plays it by default.
    from click.testing import CliRunner

    from launch.cli import main

    confirmed = next(r for r in records if r.get("event") == "confirmation" and r["solved"])
    played = CliRunner().invoke(
        main, ["evaluate", str(tmp_path / "run"), "--episodes", "20", "--json"]
    )
    assert played.exit_code == 0, played.output
    result = json.loads(played.output)
    assert result["checkpoint"].endswith("solved-weights.npz")
    assert result["weights_version"] == confirmed["weight_version"]
    assert result["kept_mean"] == confirmed["eval_return_mean"]
    assert result["mean"] >= 0.9 * confirmed["eval_return_mean"], result


def test_the_live_line_shows_env_faults_a_stuck_actor_and_an_old_evaluation(tmp_path) -> None:
    from apex.learning.metrics import MetricsWriter
    from launch.views.live_view import plain_line
    from launch.views.watch import RunWatch
    from tests.conftest import write_run_dir

    write_run_dir(tmp_path)  # its newest evaluation at 20 s of training
    metrics = MetricsWriter(tmp_path)
    metrics.write(
        {
            "event": "progress",
            "time_s": 95.0,
            "updates": 2000,
            "updates_per_s": 9.0,
            "env_faults": 12,
            "items_dropped": 30,
            "actors_stuck": {"3": 14},
            "env_fault_kinds": {"RuntimeError": [12, "RuntimeError: diverged"]},
        }
    )
    metrics.close()
    watch = RunWatch(tmp_path)
    watch.poll()
    line = plain_line(watch, 100.0)
    from launch.views.status import env_fault_text

    # apex status names it itself: "faults: env_faults 12 (30 items dropped; ...)".
    assert env_fault_text(watch.progress, named=False).startswith("12 (30 items dropped; ")
    assert "eval 402.5 (best 402.5, 1:15 ago)" in line, line
    assert (
        "env faults 12 (30 items dropped; RuntimeError 12: diverged); actor 3 stuck in an "
        "env step for 14 s"
    ) in line, line
