"""Greedy evaluation: one episode per copy on both kinds of vector env, the EVALUATION
message and its checks, the evaluator's cadence and confirmation over real sockets, and
the learner stopping on a confirmed solve only."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import zmq
from torch import nn

from apex.algorithms.acting_base import FeedForward
from apex.channels import ApexKind, EpisodeCollector
from apex.envs.vector import evaluation_envs
from apex.learning.evaluation import Evaluation, play_greedy, read_evaluation
from apex.learning.evaluator import Evaluator, EvaluatorConfig
from apex.learning.metrics import read_metrics
from apex.weights import WeightPublisher
from replay.errors import ProtocolError
from replay.wire.layout import Message, decode, encode
from replay.wire.transport import make_socket, send_frames
from tests.conftest import wait_for
from tests.test_learner import filled_store, make_learner


class ScriptedPolicy(FeedForward):
    """An acting policy (``apex.algorithms.protocols.ActingPolicy``) with one published number,
    ``gain``: above 0 it balances CartPole (the classic hand-written controller, which
    keeps the pole up for all 500 steps from most starts), otherwise it always pushes
    with ``action``."""

    def __init__(self, gain: float = 1.0, action: int = 0) -> None:
        self.gain, self.action = gain, action

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"gain": (1,)}

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.gain = float(arrays["gain"][0])

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        assert not scales.any(), "evaluation explores"
        if self.gain <= 0:
            return np.full(len(observations), self.action)
        angle, angular_velocity = observations[:, 2], observations[:, 3]
        return (angle + 0.5 * angular_velocity > 0).astype(np.int64)

    def td_errors(self, batch):
        raise NotImplementedError


def play(policy: ScriptedPolicy, env: str, episodes: int, seed: int) -> np.ndarray:
    envs = evaluation_envs(env, episodes)
    try:
        return play_greedy(policy, envs, seed)
    finally:
        envs.close()


class Gain(nn.Module):
    def __init__(self, gain: float) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor([gain]))


def test_cartpole_evaluates_on_its_own_vector_env() -> None:
    envs = evaluation_envs("CartPole-v1", 3)
    try:
        assert not isinstance(envs, gym.vector.SyncVectorEnv)
    finally:
        envs.close()


@pytest.mark.parametrize("env", ["CartPole-v1", "Acrobot-v1"])
def test_each_copy_plays_exactly_one_episode(env: str) -> None:
    """Pushing one way ends every CartPole episode within a few steps (returns of about
    9), and on Acrobot every episode runs to its 500-step limit at −1 a step: a copy that
    went on past its end, or a reward counted after it, would show."""
    returns = play(ScriptedPolicy(gain=0.0), env, 20, seed=5)
    assert returns.shape == (20,)
    if env == "CartPole-v1":
        assert np.all((returns >= 7) & (returns <= 12)), returns
    else:
        assert np.all(returns == -500), returns


def test_a_good_controller_reaches_the_time_limit_and_no_further() -> None:
    returns = play(ScriptedPolicy(), "CartPole-v1", 20, seed=1)
    assert returns.max() == 500
    assert np.median(returns) == 500


@pytest.mark.parametrize("env", ["CartPole-v1", "LunarLander-v3"])
def test_the_same_seed_gives_the_same_returns_on_envs_used_before(env: str) -> None:
    """The evaluator keeps its envs: a reset with the seed starts every copy afresh."""
    # Returns that depend on each copy's start: a copy not started afresh would show.
    policy = ScriptedPolicy(gain=0.0 if env == "CartPole-v1" else 1.0)
    envs = evaluation_envs(env, 10)
    try:
        first = play_greedy(policy, envs, seed=3)
        play_greedy(policy, envs, seed=4)
        again = play_greedy(policy, envs, seed=3)
    finally:
        envs.close()
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, play(policy, env, 10, seed=3))
    assert not np.array_equal(first, play(policy, env, 10, seed=4))  # the seed matters


def _wire(message: Message) -> Message:
    return decode([bytes(frame) for frame in encode(message)], ApexKind)


class Door(gym.Env):
    """Action 1 opens the door (+1, the episode ends); action 0 waits, for ever but for the
    time limit."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        opened = int(action) == 1
        return np.zeros(1, np.float32), float(opened), opened, False, {}


class Waits(FeedForward):
    def explore(self, observations, scales, rng, state=None) -> np.ndarray:
        return np.zeros(len(observations), np.int64)


def test_an_evaluation_epsilon_frees_a_policy_stuck_where_it_never_acts() -> None:
    """Greedy, a policy that always waits plays each episode to its time limit (0); at
    ``eval_epsilon`` 0.5 a random action opens the door within a few steps (1)."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(Door(), 500)] * 8,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert (play_greedy(Waits(), envs, seed=0) == 0).all()
    assert (play_greedy(Waits(), envs, seed=0, epsilon=0.5) == 1).all()
    envs.close()
    from launch.config import ConfigError, resolve

    assert resolve({"env": "Pong"}).learner.eval_epsilon == 0.05  # the Nature DQN's
    assert resolve({}).learner.eval_epsilon == 0.0
    with pytest.raises(ConfigError, match="eval_epsilon"):
        resolve({"learner": {"eval_epsilon": 1.5}})


def test_an_evaluation_crosses_the_wire_intact() -> None:
    sent = Evaluation(7, 123_456, np.array([500.0, 480.0, 499.5]), 4, True, 2)
    got = read_evaluation(_wire(sent.to_message(0)))
    assert (got.weight_version, got.env_steps, got.index, got.confirmation, got.skipped) == (
        7,
        123_456,
        4,
        True,
        2,
    )
    np.testing.assert_array_equal(got.returns, sent.returns)


@pytest.mark.parametrize(
    "mangle, match",
    [
        (lambda m, r, f: (m, (r.astype(np.float32), f)), "float64"),
        (lambda m, r, f: (m, (np.array([np.nan, 1.0]), f)), "not finite"),
        (lambda m, r, f: (replace(m, count=5), (r, f)), "as many"),
        (lambda m, r, f: (m, (r, np.array([0, 2, 0, 0]))), "confirmation flag"),
        (lambda m, r, f: (m, (r, np.array([0, -1, 0, 0]))), "facts"),
        (lambda m, r, f: (m, (r,)), "2 arrays"),
        (lambda m, r, f: (replace(m, kind=ApexKind.EPISODES), (r, f)), "expected EVALUATION"),
        (lambda m, r, f: (replace(m, scalar=float("nan")), (r, f)), "counts"),
    ],
)
def test_a_malformed_evaluation_is_refused(mangle, match: str) -> None:
    message = Evaluation(1, 10, np.array([1.0, 2.0]), 0, False).to_message(0)
    returns, facts = message.arrays
    base, arrays = mangle(message, returns, facts)
    with pytest.raises(ProtocolError, match=match):
        read_evaluation(_wire(replace(base, arrays=arrays)))


@contextlib.contextmanager
def evaluator_on_sockets(config: EvaluatorConfig, policy: ScriptedPolicy | list[ScriptedPolicy]):
    """An evaluator on a thread between a real weight publisher and episode collector.
    Yields the evaluations heard, ``published_until(count, module, version, steps)`` (which
    publishes until ``count`` evaluations are in) and the publisher."""
    context = zmq.Context()
    got: list[Evaluation] = []
    collector = EpisodeCollector(context, on_evaluation=lambda m: got.append(read_evaluation(m)))
    publisher = WeightPublisher(context)
    evaluator = Evaluator(config, policy, publisher.endpoint, collector.endpoint)
    thread = threading.Thread(target=evaluator.run, daemon=True)
    thread.start()

    def published_until(count: int, module: nn.Module, version: int, steps: int) -> None:
        def heard() -> bool:
            publisher.publish(module, version, steps)  # again until heard (PUB drops early)
            collector.drain()
            return len(got) >= count

        wait_for(heard, timeout_s=30, what=f"{count} evaluations", interval_s=0.05)

    published_until.evaluator = evaluator  # type: ignore[attr-defined]
    try:
        yield got, published_until, publisher
    finally:
        evaluator.stop()
        thread.join(timeout=10)
        publisher.close()
        collector.close()
        context.destroy(linger=0)
    assert not thread.is_alive()


@pytest.mark.slow
def test_the_evaluator_keeps_its_cadence_skips_what_it_missed_and_confirms() -> None:
    """Over real sockets: weights below the first cadence point are not evaluated; weights
    past three points are evaluated once, with two points skipped; weights at the target
    are confirmed on their own number of episodes."""
    config = EvaluatorConfig(
        "CartPole-v1",
        seed=0,
        every_steps=1000,
        episodes=8,
        confirm_episodes=30,
        target_return=475.0,
    )
    with evaluator_on_sockets(config, ScriptedPolicy()) as (got, published_until, publisher):
        for version in (1, 2, 3):  # below the first point: never evaluated
            publisher.publish(Gain(1.0), version, 999)
        published_until(1, Gain(-1.0), 4, 3500)
        published_until(3, Gain(1.0), 5, 4200)
        periodic_low, periodic_high, confirmation = got[:3]
        assert (periodic_low.weight_version, periodic_low.env_steps) == (4, 3500)
        assert periodic_low.skipped == 2 and not periodic_low.confirmation
        assert periodic_low.returns.size == 8 and periodic_low.mean < 20
        assert periodic_high.weight_version == 5 and periodic_high.skipped == 0
        assert periodic_high.index == 1 and periodic_high.mean >= 475
        assert confirmation.confirmation and confirmation.index == 1
        assert confirmation.returns.size == 30 and confirmation.weight_version == 5
        # Solved: later evaluations at the target are not confirmed again.
        published_until(4, Gain(1.0), 6, 5100)
        assert not got[3].confirmation and got[3].mean >= 475 and got[3].index == 2
        publisher.publish(Gain(1.0), 7, 6100)
        published_until(5, Gain(1.0), 8, 7100)
        # Version 7 may be taken before 8 replaces it, or not: five or six evaluations, and
        # none confirmed after the first confirmation.
        assert [e.confirmation for e in got[:3]] == [False, False, True]
        assert len(got) in (5, 6) and not any(e.confirmation for e in got[3:])


def _send_evaluations(endpoint: str, evaluations: list[Evaluation | bytes]) -> None:
    context = zmq.Context()
    socket = make_socket(context, zmq.PUSH, 100)
    socket.connect(endpoint)
    for sequence, evaluation in enumerate(evaluations):
        if isinstance(evaluation, bytes):
            socket.send(evaluation)
        else:
            send_frames(socket, encode(evaluation.to_message(sequence)))
    socket.close(linger=2000)
    context.term()


@pytest.mark.slow
@pytest.mark.parametrize("confirmed", [False, True])
def test_the_learner_stops_only_on_a_confirmed_solve(tmp_path: Path, confirmed: bool) -> None:
    """A periodic evaluation at the target is written but solves nothing; its confirmation
    at the target ends the run as solved. A malformed message is counted and skipped."""
    store = filled_store(np.random.default_rng(5))
    learner = make_learner(
        tmp_path, store, max_updates=2_000, eval_every_steps=1000, target_return=475.0
    )
    at_target = np.full(20, 490.0)
    sent: list[Evaluation | bytes] = [b"not a message", Evaluation(1, 1000, at_target, 0, False)]
    if confirmed:
        sent.append(Evaluation(1, 1000, np.full(100, 480.0), 0, True))
    _send_evaluations(learner.episodes_endpoint, sent)
    outcome = learner.run()
    records = read_metrics(tmp_path)
    evaluations = [r for r in records if r["event"] in ("evaluation", "confirmation")]
    assert [r["event"] for r in evaluations] == ["evaluation", "confirmation"][: len(sent) - 1]
    assert evaluations[0]["eval_return_mean"] == 490.0 and not evaluations[0]["solved"]
    assert evaluations[0]["weights_updates"] == 0  # version 1: published before update 1
    [end] = [r for r in records if r["event"] == "end"]
    assert end["last_eval_return"] == 490.0
    if confirmed:
        assert outcome.reason == "solved" and outcome.solved
        assert evaluations[1]["solved"] and evaluations[1]["episodes"] == 100
        assert outcome.counters.updates < 2_000 and outcome.counters.solved_at_s is not None
    else:
        assert outcome.reason == "max_updates" and not outcome.solved
    rejected = [r["episode_messages_rejected"] for r in records if r["event"] == "progress"]
    assert max(rejected) == 1


@pytest.mark.slow
def test_a_solve_is_timed_at_the_publication_of_the_weights_it_played(tmp_path: Path) -> None:
    """A confirmation that reaches the learner long after the weights it played went out
    (a slow evaluator) times the solve at their publication; the time it was heard is kept
    beside it, in the counters and in the metrics."""
    store = filled_store(np.random.default_rng(6))
    learner = make_learner(
        tmp_path, store, max_updates=100_000, eval_every_steps=1000, target_return=475.0
    )
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(outcome=learner.run()), daemon=True)
    thread.start()
    try:
        # Version 1 goes out before the first update; the verdict on it comes 300 later.
        wait_for(lambda: learner.counters.updates >= 300, 60.0, "300 updates", interval_s=0.01)
        _send_evaluations(
            learner.episodes_endpoint,
            [
                Evaluation(1, 1000, np.full(20, 490.0), 0, False),
                Evaluation(1, 1000, np.full(100, 480.0), 0, True),
            ],
        )
        thread.join(timeout=60.0)
    finally:
        learner.stop()
        thread.join(timeout=30.0)
    assert not thread.is_alive()
    counters = result["outcome"].counters
    assert result["outcome"].reason == "solved"
    [confirmation] = [r for r in read_metrics(tmp_path) if r["event"] == "confirmation"]
    assert confirmation["weights_time_s"] == counters.solved_at_s
    assert counters.solve_heard_at_s == confirmation["time_s"]
    # 300 updates lie between the two, whatever this machine's speed.
    first_update = next(r for r in read_metrics(tmp_path) if r["event"] == "first_update")
    assert counters.solved_at_s <= first_update["time_s"] < counters.solve_heard_at_s


class HeldPolicy(ScriptedPolicy):
    """Plays as :class:`ScriptedPolicy`, except that weights of gain -2 hold every step
    until ``release`` is set: an evaluation that takes as long as the test says."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        if self.gain == -2.0:
            assert self.release.wait(timeout=30.0), "never released"
        return super().explore(observations, scales, rng, state)


@pytest.mark.slow
def test_a_second_lane_evaluates_while_the_first_still_plays() -> None:
    """With two lanes, weights at the next cadence point are evaluated while an evaluation
    of older weights is still under way (one lane would hold them until it ended); each
    lane plays on its own copy of the policy."""
    release = threading.Event()
    config = EvaluatorConfig(
        "CartPole-v1",
        seed=0,
        every_steps=1000,
        episodes=4,
        confirm_episodes=0,
        target_return=None,
        lanes=2,
    )
    policies = [HeldPolicy(release), HeldPolicy(release)]
    with evaluator_on_sockets(config, policies) as (got, published_until, publisher):

        def taken() -> bool:  # again until taken (PUB drops what it sends before a SUB joins)
            publisher.publish(Gain(-2.0), 1, 1000)
            return policies[0].gain == -2.0

        wait_for(taken, timeout_s=30, what="version 1 taken by the first lane", interval_s=0.05)
        published_until(1, Gain(1.0), 2, 2000)  # heard while version 1 is held
        assert [(e.weight_version, e.mean >= 475) for e in got] == [(2, True)]
        release.set()
        published_until(2, Gain(1.0), 2, 2000)
        assert [e.weight_version for e in got] == [2, 1] and got[1].mean < 475
        assert sorted(e.index for e in got) == [0, 1]
    with pytest.raises(ValueError, match="1 policies for 2 evaluation lanes"):
        Evaluator(config, ScriptedPolicy(), "tcp://127.0.0.1:1", "tcp://127.0.0.1:2")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backlog", "expected"),
    [(8, [(1, 0), (2, 0), (3, 0), (4, 0)]), (2, [(1, 0), (2, 0), (4, 1)])],
)
def test_a_backlog_evaluates_every_cadence_point_in_order_however_late(
    backlog: int, expected: list[tuple[int, int]]
) -> None:
    """While the one lane is held, three more cadence points pass: with a backlog of 8
    each is evaluated afterwards, in order, on the weights published at it; a backlog of 2
    keeps the oldest waiting point and the newest, the one between counted as skipped."""
    release = threading.Event()
    config = EvaluatorConfig(
        "CartPole-v1",
        seed=0,
        every_steps=1000,
        episodes=2,
        confirm_episodes=0,
        target_return=None,
        backlog=backlog,
    )
    policy = HeldPolicy(release)
    with evaluator_on_sockets(config, policy) as (got, published_until, publisher):
        evaluator = published_until.evaluator

        def taken(version: int, gain: float, steps: int, started: bool = False) -> bool:
            # Again until taken in (a PUB drops what it sends before a SUB joins).
            publisher.publish(Gain(gain), version, steps)
            return policy.gain == gain if started else evaluator.weights_version == version

        wait_for(
            lambda: taken(1, -2.0, 1000, started=True), 30, "version 1 playing", interval_s=0.05
        )
        for version in (2, 3, 4):  # each taken in before the next is published
            wait_for(
                lambda v=version: taken(v, float(v), 1000 * v),
                30,
                f"version {version} taken in",
                interval_s=0.05,
            )
        release.set()
        published_until(len(expected), Gain(9.0), 4, 4000)
        assert [(e.weight_version, e.skipped) for e in got] == expected
        assert [e.index for e in got] == list(range(len(expected)))


@pytest.mark.slow
def test_the_evaluator_process_runs_at_the_run_s_niceness(tmp_path: Path) -> None:
    """An evaluation measures training: its process takes only the cores the run's roles
    leave (learner.eval_niceness)."""
    from launch.config import resolve
    from launch.evaluator_process import EvaluatorProcess

    context = zmq.Context()
    publisher = WeightPublisher(context)
    collector = EpisodeCollector(context)
    evaluator = EvaluatorProcess(
        resolve({}, {"learner": {"eval_niceness": 7}}),
        tmp_path,
        publisher.endpoint,
        collector.endpoint,
    )
    try:
        evaluator.start()
        wait_for(
            lambda: evaluator.state == "up", timeout_s=60, what="the evaluator up", interval_s=0.05
        )
        stat = Path(f"/proc/{evaluator._process.process.pid}/stat").read_text()
        niceness = int(stat.rsplit(")", 1)[1].split()[16])  # field 19 of proc(5)
        assert niceness == os.nice(0) + 7
    finally:
        evaluator.stop()
        publisher.close()
        collector.close()
        context.term()


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ({"eval_niceness": 20}, "learner.eval_niceness must be an integer in [0, 19], got 20"),
        ({"eval_lanes": 0}, "learner.eval_lanes"),
        ({"eval_backlog": -1}, "learner.eval_backlog must be an integer >= 0, got -1"),
        ({"eval_stepping": "fibers"}, "learner.eval_stepping must be one of"),
    ],
)
def test_evaluation_settings_are_checked(setting: dict, problem: str) -> None:
    from apex.settings import LearnerConfig

    [found] = LearnerConfig(**setting).problems()
    assert found.startswith(problem)


@pytest.mark.slow
def test_an_evaluator_that_ends_on_a_hung_step_is_restarted_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit code 4 is the watchdog's (an env step hung): the keeper restarts the evaluator
    and the learner's records count it apart from other deaths."""
    import sys

    from apex.envs.watchdog import EXIT_ENV_HUNG
    from launch import evaluator_process
    from launch.config import resolve

    hangs_once = (
        "import json, pathlib, sys; print(json.dumps({'ready': {}}), flush=True); "
        f"marker = pathlib.Path({str(tmp_path / 'hung')!r}); "
        f"sys.exit(0 if marker.exists() else (marker.touch() or {EXIT_ENV_HUNG}))"
    )

    def fake_evaluator(*_arguments, **options):
        return evaluator_process.RoleProcess([sys.executable, "-c", hangs_once], **options)

    monkeypatch.setattr(evaluator_process.RoleProcess, "apex", fake_evaluator)
    evaluator = evaluator_process.EvaluatorProcess(resolve({}), tmp_path, "tcp://a", "tcp://b")
    try:
        evaluator.start()
        wait_for(lambda: evaluator.hangs == 1, timeout_s=30, what="the hang counted")
        wait_for(lambda: evaluator.restarts >= 2, timeout_s=30, what="a second restart")
    finally:
        evaluator.stop()
    health = evaluator.health()
    assert health["evaluator_hangs"] == 1 and health["evaluator_restarts"] >= 2
