"""Greedy evaluation: one episode per copy on both kinds of vector env, the EVALUATION
message and its checks, the evaluator's cadence and confirmation over real sockets, and
the learner stopping on a confirmed solve only."""

from __future__ import annotations

import contextlib
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


def test_an_evaluation_crosses_the_wire_intact() -> None:
    sent = Evaluation(7, 123_456, np.array([500.0, 480.0, 499.5]), 4, True, 2)
    got = read_evaluation(_wire(sent.to_message(0)))
    assert (got.weight_version, got.env_steps, got.index, got.confirmation, got.skipped) == (
        7, 123_456, 4, True, 2)  # fmt: skip
    np.testing.assert_array_equal(got.returns, sent.returns)


@pytest.mark.parametrize(
    "mangle, match",
    [
        (lambda m, r, f: (m, (r.astype(np.float32), f)), "float64"),
        (lambda m, r, f: (m, (np.array([np.nan, 1.0]), f)), "not finite"),
        (lambda m, r, f: (replace(m, count=5), (r, f)), "as many"),
        (lambda m, r, f: (m, (r, np.array([0, 2, 0]))), "confirmation flag"),
        (lambda m, r, f: (m, (r, np.array([0, -1, 0]))), "facts"),
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
def evaluator_on_sockets(config: EvaluatorConfig, policy: ScriptedPolicy):
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
    config = EvaluatorConfig("CartPole-v1", seed=0, every_steps=1000, episodes=8,
                             confirm_episodes=30, target_return=475.0)  # fmt: skip
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


class ShakyWhenConfirmed(ScriptedPolicy):
    """Balances every copy at gain 1; at a gain under 1 it lets the first copy of a batch
    of more than 8 (a confirmation, not a periodic evaluation) fall: about 484 over 30."""

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        actions = super().explore(observations, scales, rng)
        if self.gain < 1 and len(observations) > 8:
            actions[0] = 0
        return actions


@pytest.mark.slow
@pytest.mark.parametrize("follow, margin", [(False, 0.0), (True, 0.0), (True, 20.0)])
def test_better_confirmations_are_asked_for_only_where_followed(
    follow: bool, margin: float
) -> None:
    """``confirm_improvements``: after a marginal confirmed solve, a periodic evaluation
    above it (by more than ``improvement_margin``) is confirmed too, and one no better
    than the best confirmed is not."""
    config = EvaluatorConfig("CartPole-v1", seed=0, every_steps=1000, episodes=8,
                             confirm_episodes=30, target_return=475.0,
                             confirm_improvements=follow, improvement_margin=margin)  # fmt: skip
    confirms = follow and margin == 0  # 500 is not 20 better than the 484 confirmed
    with evaluator_on_sockets(config, ShakyWhenConfirmed()) as (got, published_until, _):
        published_until(2, Gain(0.5), 1, 1000)  # 500 periodic, then 484 confirmed: solved
        assert got[1].confirmation and 475 <= got[1].mean < 500
        published_until(3, Gain(1.0), 2, 2000)  # 500 periodic: better than 484
        if confirms:
            published_until(4, Gain(1.0), 2, 2000)
            assert got[3].confirmation and got[3].mean == 500 and got[3].weight_version == 2
        published_until(len(got) + 1, Gain(1.0), 3, 3000)  # 500 again: no better than 500
        published_until(len(got) + 1, Gain(1.0), 4, 4000)
        assert [e.confirmation for e in got] == [False, True, False, *[True] * confirms,
                                                 False, False]  # fmt: skip


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
    learner = make_learner(tmp_path, store, max_updates=2_000, eval_every_steps=1000,
                           target_return=475.0)  # fmt: skip
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


def _run_beside(learner, send) -> object:
    """The learner's run, with ``send`` (what the evaluator would say) on a thread beside it."""
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    outcome = learner.run()
    sender.join(timeout=10)
    return outcome


def _confirmations(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir) if r["event"] == "confirmation"]


def _newest_kept_weights(learner) -> tuple[int, dict[str, torch.Tensor]]:
    """The newest weights version the learner keeps, and its state: read from beside the
    training thread, a version is counted a moment before its weights are kept."""
    found: list = []

    def kept() -> bool:
        version = learner.counters.weight_version
        state = learner._weights.state_of(version)
        found[:] = [version, state]
        return state is not None

    wait_for(kept, timeout_s=30, what="kept weights", interval_s=0.01)
    return found[0], found[1]


def _confirm(learner, run_dir: Path, count: int, evaluations: list[Evaluation]) -> None:
    """Sends ``evaluations``; returns once the learner has written ``count`` confirmations."""
    _send_evaluations(learner.episodes_endpoint, evaluations)
    wait_for(lambda: len(_confirmations(run_dir)) == count, timeout_s=30,
             what=f"{count} confirmations", interval_s=0.01)  # fmt: skip


def test_a_run_that_trains_on_past_its_solve_steps_at_its_solved_step_size(
    tmp_path: Path,
) -> None:
    """``learner.solved.learning_rate``: the step size from the confirmed solve on (the
    schedule before it), in a run that trains on to its update limit."""
    store = filled_store(np.random.default_rng(6))
    learner = make_learner(tmp_path, store, max_updates=300, eval_every_steps=1000,
                           target_return=475.0, stop_when_solved=False, learning_rate=1e-3,
                           solved={"learning_rate": 1e-5})  # fmt: skip
    periodic = Evaluation(1, 1000, np.full(20, 490.0), 0, False)
    _send_evaluations(learner.episodes_endpoint,
                      [periodic, Evaluation(1, 1000, np.full(100, 480.0), 0, True)])  # fmt: skip
    outcome = learner.run()
    assert outcome.solved and outcome.reason == "max_updates"
    assert {g["lr"] for o in learner.algorithm.optimizers for g in o.param_groups} == {1e-5}


def test_a_run_that_restarts_at_its_solve_goes_on_from_the_confirmed_weights(
    tmp_path: Path,
) -> None:
    """``learner.solved.restart``: the learner has trained past the weights a confirmation
    is about when it hears of it; at the solve its networks take those weights back
    (``Algorithm.train_from``), and training goes on from them (here at a step size too
    small to move them)."""
    store = filled_store(np.random.default_rng(7))
    learner = make_learner(tmp_path, store, max_updates=400, eval_every_steps=1000,
                           target_return=475.0, stop_when_solved=False, learning_rate=1e-2,
                           solved={"learning_rate": 1e-12, "restart": True})  # fmt: skip
    algorithm = learner.algorithm
    first = {name: value.clone() for name, value in algorithm.online.state_dict().items()}

    def confirm_version_1_later() -> None:  # weights published before the first update
        # Paced: a busy poll holds the GIL the learner's thread trains with.
        wait_for(lambda: learner.counters.updates >= 100, timeout_s=60, what="100 updates",
                 interval_s=0.01)  # fmt: skip
        _send_evaluations(learner.episodes_endpoint,
                          [Evaluation(1, 1000, np.full(20, 490.0), 0, False),
                           Evaluation(1, 1000, np.full(100, 480.0), 0, True)])  # fmt: skip

    outcome = _run_beside(learner, confirm_version_1_later)
    assert outcome.solved and outcome.reason == "max_updates"
    [confirmation] = _confirmations(tmp_path)
    assert confirmation["updates"] >= 100  # heard after training had moved the weights on
    for network in (algorithm.online, algorithm.target):
        for name, value in network.state_dict().items():
            torch.testing.assert_close(value, first[name], rtol=0, atol=1e-6)


FOLLOWS = {"follow_better": True, "back_to_confirmed": True}


def test_a_better_confirmation_takes_the_first_one_s_place(tmp_path: Path) -> None:
    """``learner.solved.follow_better``: after the solve, a confirmation above the best
    confirmed mean makes its weights those training goes back to; one under it does not."""
    store = filled_store(np.random.default_rng(8))
    learner = make_learner(tmp_path, store, max_updates=100_000, eval_every_steps=1000,
                           target_return=475.0, stop_when_solved=False, learning_rate=1e-2,
                           solved=FOLLOWS)  # fmt: skip
    solving = learner.solving
    assert solving.settings.confirms_improvements
    kept: dict[str, torch.Tensor] = {}

    def confirm_then_better_then_worse() -> None:
        try:
            wait_for(lambda: learner.counters.updates >= 50, timeout_s=60, what="50 updates",
                     interval_s=0.01)  # fmt: skip
            _send_evaluations(learner.episodes_endpoint,
                              [Evaluation(1, 1000, np.full(100, 480.0), 0, True)])  # fmt: skip
            wait_for(lambda: solving.confirmed is not None, timeout_s=30, what="the solve",
                     interval_s=0.01)  # fmt: skip
            later, state = _newest_kept_weights(learner)  # trained past version 1
            kept.update(state)
            better = Evaluation(later, 2000, np.full(100, 490.0), 1, True)
            worse = Evaluation(1, 3000, np.full(100, 485.0), 2, True)
            _confirm(learner, tmp_path, 3, [better, worse])
        finally:
            learner.stop()

    outcome = _run_beside(learner, confirm_then_better_then_worse)
    assert outcome.solved and outcome.reason == "stopped"
    assert [r["eval_return_mean"] for r in _confirmations(tmp_path)] == [480.0, 490.0, 485.0]
    confirmed = solving.confirmed
    assert kept and confirmed.keys() == kept.keys()
    for name, value in kept.items():
        torch.testing.assert_close(confirmed[name], value, rtol=0, atol=0)


def test_a_better_confirmation_is_kept_and_training_goes_on(tmp_path: Path) -> None:
    """With ``learner.solved.restart``, only the first solve restarts: a better
    confirmation later becomes the weights training goes back to and leaves the networks
    where training has them (here frozen at the first confirmation's weights by a step
    size too small to move them)."""
    store = filled_store(np.random.default_rng(9))
    learner = make_learner(tmp_path, store, max_updates=100_000, eval_every_steps=1000,
                           target_return=475.0, stop_when_solved=False, learning_rate=1e-2,
                           solved={**FOLLOWS, "learning_rate": 1e-12,
                                   "restart": True})  # fmt: skip
    algorithm, solving = learner.algorithm, learner.solving
    first = {name: value.clone() for name, value in algorithm.online.state_dict().items()}
    later: dict[str, torch.Tensor] = {}

    def confirm_then_better() -> None:
        try:
            wait_for(lambda: learner.counters.updates >= 50, timeout_s=60, what="50 updates",
                     interval_s=0.01)  # fmt: skip
            version, state = _newest_kept_weights(learner)  # trained 50 updates past 1
            later.update(state)
            _send_evaluations(learner.episodes_endpoint,
                              [Evaluation(1, 1000, np.full(100, 480.0), 0, True)])  # fmt: skip
            wait_for(lambda: solving.confirmed is not None, timeout_s=30, what="the solve",
                     interval_s=0.01)  # fmt: skip
            _confirm(
                learner, tmp_path, 2, [Evaluation(version, 2000, np.full(100, 490.0), 1, True)]
            )
        finally:
            learner.stop()

    outcome = _run_beside(learner, confirm_then_better)
    assert outcome.solved and outcome.reason == "stopped"
    assert later and any(not torch.equal(later[name], first[name]) for name in first)
    for name, value in later.items():
        torch.testing.assert_close(solving.confirmed[name], value, rtol=0, atol=0)
    for network in (algorithm.online, algorithm.target):  # the first solve's restart only
        for name, value in network.state_dict().items():
            torch.testing.assert_close(value, first[name], rtol=0, atol=1e-6)


def _step_sizes(learner) -> set[float]:
    return {group["lr"] for o in learner.algorithm.optimizers for group in o.param_groups}


def test_a_solve_under_the_settle_bar_stops_the_clock_and_training_settles_later(
    tmp_path: Path,
) -> None:
    """``learner.solved.settle_return``: a confirmed solve under the bar is the run's
    solve, but the step size and the weights kept stay as before it, through a better
    confirmation still under the bar; the first one at or above it settles the run, and a
    resumed run stays settled."""
    store = filled_store(np.random.default_rng(10))
    settings = {
        "eval_every_steps": 1000,
        "target_return": 475.0,
        "stop_when_solved": False,
        "learning_rate": 1e-3,
        "solved": {**FOLLOWS, "learning_rate": 1e-5, "settle_return": 495.0},
    }
    learner = make_learner(tmp_path, store, max_updates=100_000, **settings)
    solving = learner.solving
    seen: dict[str, object] = {}

    def updates_on(count: int) -> None:
        start = learner.counters.updates
        wait_for(lambda: learner.counters.updates >= start + count, timeout_s=60,
                 what=f"{count} more updates", interval_s=0.01)  # fmt: skip

    def solve_under_then_over_the_bar() -> None:
        try:
            updates_on(20)
            _confirm(
                learner,
                tmp_path,
                2,
                [
                    Evaluation(1, 1000, np.full(100, 480.0), 0, True),
                    Evaluation(1, 2000, np.full(100, 490.0), 1, True),
                ],
            )
            updates_on(10)
            seen["unsettled"] = (learner.counters.solved_at_s, learner.counters.settled_at_s,
                                 solving.confirmed, _step_sizes(learner))  # fmt: skip
            _confirm(learner, tmp_path, 3, [Evaluation(1, 3000, np.full(100, 496.0), 2, True)])
            wait_for(lambda: solving.confirmed is not None, timeout_s=30, what="the settling",
                     interval_s=0.01)  # fmt: skip
            updates_on(10)
            seen["settled"] = _step_sizes(learner)
        finally:
            learner.stop()

    outcome = _run_beside(learner, solve_under_then_over_the_bar)
    solved_at, settled_at, confirmed, step_sizes = seen["unsettled"]
    assert outcome.solved and solved_at is not None
    assert settled_at is None and confirmed is None and step_sizes == {1e-3}
    assert seen["settled"] == {1e-5}
    assert outcome.counters.settled_at_s >= outcome.counters.solved_at_s

    checkpoint = max((tmp_path / "checkpoints").glob("*.pt"), key=lambda p: p.stat().st_mtime)
    resumed = make_learner(tmp_path, store, resume_from=checkpoint,
                           max_updates=outcome.counters.updates + 5, **settings)  # fmt: skip
    assert resumed.counters.settled_at_s == outcome.counters.settled_at_s
    resumed.run()
    assert resumed.solving.confirmed is not None and _step_sizes(resumed) == {1e-5}


def _evaluations(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir) if r["event"] == "evaluation"]


def test_a_settled_run_under_the_target_goes_back_to_its_confirmed_weights_once_per_new(
    tmp_path: Path,
) -> None:
    """``learner.solved.back_to_confirmed``: a periodic evaluation under the target puts the
    confirmed weights back into the online, target and averaged networks, but only once
    the run has settled, and only for weights published since it last went back."""
    store = filled_store(np.random.default_rng(11))
    learner = make_learner(tmp_path, store, max_updates=100_000, eval_every_steps=1000,
                           target_return=475.0, stop_when_solved=False, learning_rate=1e-2,
                           solved={"learning_rate": 1e-12, "settle_return": 495.0,
                                   "policy_average": 0.01, "average_from_solve": True,
                                   "back_to_confirmed": True})  # fmt: skip
    algorithm, solving = learner.algorithm, learner.solving
    seen: dict[str, object] = {}

    def evaluate(count: int, evaluation: Evaluation) -> None:
        _send_evaluations(learner.episodes_endpoint, [evaluation])
        wait_for(lambda: len(_evaluations(tmp_path)) == count, timeout_s=30,
                 what=f"{count} evaluations", interval_s=0.01)  # fmt: skip

    def low_then_settle_then_low_twice() -> None:
        try:
            evaluate(1, Evaluation(1, 500, np.full(20, 300.0), 0, False))  # not settled
            seen["unsettled"] = solving.went_back
            version, state = _newest_kept_weights(learner)
            seen["anchor"] = state
            start = learner.counters.updates
            wait_for(lambda: learner.counters.updates >= start + 30, timeout_s=60,
                     what="30 more updates", interval_s=0.01)  # fmt: skip
            _confirm(learner, tmp_path, 1, [Evaluation(version, 1000, np.full(100, 496.0),
                                                       1, True)])  # fmt: skip
            wait_for(lambda: solving.confirmed is not None, timeout_s=30, what="the settling",
                     interval_s=0.01)  # fmt: skip
            seen["before"] = {k: v.clone() for k, v in algorithm.online.state_dict().items()}
            evaluate(2, Evaluation(learner.counters.weight_version, 2000, np.full(20, 300.0),
                                   2, False))  # fmt: skip
            seen["after"] = [{k: v.clone() for k, v in network.state_dict().items()}
                             for network in (algorithm.online, algorithm.target,
                                             solving.average)]  # fmt: skip
            evaluate(3, Evaluation(version, 3000, np.full(20, 300.0), 3, False))  # older
        finally:
            learner.stop()

    outcome = _run_beside(learner, low_then_settle_then_low_twice)
    assert outcome.counters.settled_at_s is not None
    assert seen["unsettled"] == 0 and solving.went_back == 1
    anchor = seen["anchor"]
    assert any(not torch.equal(seen["before"][name], anchor[name]) for name in anchor)
    for network in seen["after"]:
        for name, value in anchor.items():
            torch.testing.assert_close(network[name], value, rtol=0, atol=1e-6)
    [end] = [r for r in read_metrics(tmp_path) if r["event"] == "end"]
    assert end["back_to_confirmed"] == 1
