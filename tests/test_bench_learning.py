"""The learning benchmark (``apex bench learn``): how runs are scored (confirmed solves,
censored times, returns at checkpoints, stays solved), the comparison between sides, a
learning regression in ``apex bench compare``, resuming a record, and the quick command
end to end, which checks plumbing and schema, never speed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench import report
from bench.compare import compare
from bench.learning import learn_report, learn_suite
from bench.learning.learn_tasks import TASKS, quick_task
from launch.cli import main

TASK = dataclasses.replace(TASKS["CartPole-v1"], budget_s=100.0, checkpoints_s=(10.0, 50.0))


def fake_run(implementation: str, seed: int, solve_s: float | None, **extra) -> dict:
    """A run that evaluates at 5, 15, 25, ... s; with ``solve_s``, a confirmed solve then
    (its periodic evaluation at the target just before)."""
    evaluations, confirmations = [], []
    for t in range(5, 100, 10):
        if solve_s is not None and t > solve_s and extra.get("stopped_at_solve", True):
            break
        reached = solve_s is not None and t >= solve_s - 1
        evaluations.append([float(t), 1000 * t, 10 * t, 490.0 if reached else float(t)])
    if solve_s is not None:
        confirmations.append([solve_s, 1000 * solve_s, 10 * solve_s, 480.0])
    run = {
        "implementation": implementation,
        "seed": seed,
        "budget_s": TASK.budget_s,
        "evaluations": evaluations,
        "confirmations": confirmations,
        "solved": solve_s is not None,
        "solve_s": solve_s,
        "solve_env_steps": None if solve_s is None else int(1000 * solve_s),
        "solve_updates": None if solve_s is None else int(10 * solve_s),
        "end_s": solve_s or TASK.budget_s,
        "stopped_at_solve": True,
    }
    return {**run, **extra}


def test_a_run_s_return_is_its_newest_evaluation_then_its_confirmation() -> None:
    run = fake_run("apex", 0, solve_s=26.0)
    assert learn_suite.return_at(run, 4.0) is None  # no evaluation heard yet
    assert learn_suite.return_at(run, 16.0) == 15.0
    assert learn_suite.return_at(run, 60.0) == 480.0  # solved and stopped at 26 s
    unsolved = fake_run("apex", 1, solve_s=None)
    assert learn_suite.return_at(unsolved, 60.0) == 55.0


def test_stays_solved_counts_the_evaluations_after_the_first_confirmed_solve() -> None:
    run = fake_run("apex", 0, solve_s=26.0, stopped_at_solve=False)
    # After 26 s: evaluations at 35, 45, ..., 95 s, all at 490 in fake_run.
    assert learn_suite.stays_solved(run, 475.0) == 1.0
    run["evaluations"][-1][3] = 100.0
    assert learn_suite.stays_solved(run, 475.0) == pytest.approx(6 / 7)
    assert learn_suite.stays_solved(fake_run("apex", 1, None), 475.0) is None


def test_unsolved_runs_count_at_the_budget_and_bound_the_iqm_when_in_the_middle() -> None:
    runs = [fake_run("apex", s, solve_s=10.0 + s) for s in range(5)]
    runs += [fake_run("apex", s, None) for s in (5, 6, 7)]
    records = {r["metric"]: r for r in learn_suite.side_records(TASK, "apex", runs)}
    time = records["time_to_confirmed_solve"]
    assert time["unsolved"] == 3 and time["max"] == TASK.budget_s
    assert time["lower_bound"]  # of 8, the middle half (3rd-6th fastest) holds one unsolved
    assert time["ci_low"] <= time["iqm"] <= time["ci_high"]
    assert records["env_steps_to_confirmed_solve"]["unsolved"] == 3
    assert "return_at_10s" in records and "return_at_50s" in records
    # Two unsolved of ten sit in the slowest quarter: the IQM is an estimate, not a bound.
    runs = [fake_run("apex", s, solve_s=10.0 + s) for s in range(8)]
    runs += [fake_run("apex", s, None) for s in (8, 9)]
    time = next(
        r
        for r in learn_suite.side_records(TASK, "apex", runs)
        if r["metric"] == "time_to_confirmed_solve"
    )
    assert time["unsolved"] == 2 and not time["lower_bound"]


def test_the_comparison_gives_the_iqm_ratio_and_the_probability_of_improvement() -> None:
    apex = [fake_run("apex", s, solve_s=10.0 + s) for s in range(10)]
    peer = [fake_run("sb3-dqn", s, solve_s=40.0 + s) for s in range(10)]
    records = learn_suite.side_records(TASK, "apex", apex)
    records += learn_suite.side_records(TASK, "sb3-dqn", peer)
    [ratio] = learn_suite.comparisons(TASK, records)
    assert ratio["ratio"] == pytest.approx(44.5 / 14.5)
    assert ratio["probability_of_improvement"] == 1.0 and not ratio["intervals_overlap"]
    assert not ratio["ratio_lower_bound"]
    # The peer unsolved: its IQM, and so the ratio, are lower bounds (its runs count at
    # the budget, below their true times).
    unsolved = [fake_run("sb3-dqn", s, None) for s in range(10)]
    records = learn_suite.side_records(TASK, "apex", apex)
    records += learn_suite.side_records(TASK, "sb3-dqn", unsolved)
    [ratio] = learn_suite.comparisons(TASK, records)
    assert ratio["ratio_lower_bound"] and ratio["ratio"] == pytest.approx(TASK.budget_s / 14.5)
    assert ratio["probability_of_improvement"] == 1.0 and not ratio["intervals_overlap"]
    document = {"records": records, "ratios": [ratio]}
    assert "**≥ 6.90×**" in learn_report.markdown(document)
    # apex unsolved: the ratio could only be bounded from above, and none is made.
    records = learn_suite.side_records(TASK, "apex", [fake_run("apex", s, None) for s in range(10)])
    records += learn_suite.side_records(TASK, "sb3-dqn", peer)
    assert learn_suite.comparisons(TASK, records) == []


def test_without_a_target_the_comparison_is_of_the_return_at_the_last_checkpoint() -> None:
    # MinAtar's tasks: no solve, the return at the budget; apex's runs reach 3x the peer's.
    task = dataclasses.replace(TASK, target=None, peer="sb3-dqn")
    apex = [fake_run("apex", s, None, evaluations=[[45.0, 1, 1, 30.0 + s]]) for s in range(3)]
    peer = [fake_run("sb3-dqn", s, None, evaluations=[[45.0, 1, 1, 10.0 + s]]) for s in range(3)]
    records = learn_suite.side_records(task, "apex", apex)
    records += learn_suite.side_records(task, "sb3-dqn", peer)
    [ratio] = learn_suite.comparisons(task, records)
    assert ratio["metric"] == "return_at_50s" and ratio["numerator"] == "apex"
    assert ratio["ratio"] == pytest.approx(31.0 / 11.0)
    assert ratio["probability_of_improvement"] == 1.0 and not ratio["intervals_overlap"]
    document = {
        "suites": {"learn": {"config": {"runs": [*apex, *peer]}}},
        "records": records,
        "ratios": [ratio],
    }
    assert "IQM return at 50s: **2.82×**; P(apex returns more) 1.00" in learn_report.markdown(
        document
    )


def test_runs_in_a_record_are_not_run_again_and_failures_are_listed() -> None:
    previous = [fake_run("apex", s, solve_s=10.0 + s) for s in range(3)]
    failed = {"implementation": "sb3-dqn", "seed": 0, "budget_s": 100.0, "error": "no sb3"}
    result = learn_suite.run(
        TASK, seeds=(0, 1, 2), implementations=("apex",), previous=[*previous, failed]
    )
    assert result["config"]["runs"] == previous  # nothing new ran; the failure is dropped
    [record] = [r for r in result["records"] if r["metric"] == "time_to_confirmed_solve"]
    assert record["params"]["seeds"] == [0, 1, 2]
    unavailable = learn_suite.side_records(TASK, "sb3-dqn", [failed])
    assert unavailable[0]["status"] == "unavailable" and unavailable[0]["reason"] == "no sb3"
    # A side with every run failed is no comparison, not a crash.
    assert learn_suite.comparisons(TASK, [*result["records"], *unavailable]) == []


def test_a_resumed_record_keeps_one_side_s_runs_when_asked(tmp_path: Path) -> None:
    from bench.learning.learn_command import previous_runs

    runs = [fake_run("apex", 0, 12.0), fake_run("sb3-dqn", 0, 30.0), fake_run("apex", 1, None)]
    record = tmp_path / "learn.json"
    record.write_text(
        json.dumps(
            {
                "suites": {
                    "learn": {"config": {"task": {"name": "", "env": "CartPole-v1"}, "runs": runs}}
                }
            }
        )
    )
    assert previous_runs((record,), "CartPole-v1") == runs
    assert previous_runs((record,), "CartPole-v1", ("peer",)) == [runs[1]]
    assert previous_runs((record,), "CartPole-v1", ("apex",)) == [runs[0], runs[2]]
    result = CliRunner().invoke(main, ["bench", "learn", "--keep-side", "peer", "--quick"])
    assert result.exit_code != 0 and "give --resume" in result.output


def test_compare_flags_a_learning_regression_only_when_the_interval_is_wholly_worse() -> None:
    def document(times: list[float]) -> dict:
        runs = [fake_run("apex", s, solve_s=t) for s, t in enumerate(times)]
        return {"records": learn_suite.side_records(TASK, "apex", runs)}

    before = document([10.0 + s for s in range(10)])
    slower_but_overlapping = document([12.0 + s for s in range(10)])
    wholly_slower = document([40.0 + s for s in range(10)])
    rows = {r["metric"]: r for r in compare(before, slower_but_overlapping)}
    assert rows["time_to_confirmed_solve"]["intervals"]
    assert not rows["time_to_confirmed_solve"]["regression"]  # 0.8x, but within the noise
    rows = {r["metric"]: r for r in compare(before, wholly_slower)}
    assert rows["time_to_confirmed_solve"]["regression"]
    assert rows["env_steps_to_confirmed_solve"]["regression"]


@pytest.mark.slow
def test_quick_learn_runs_both_sides_and_resumes_without_running_again(tmp_path: Path) -> None:
    out, plots = tmp_path / "learn.json", tmp_path / "plots"
    arguments = ["bench", "learn", "--quick", "--json", str(out), "--plots", str(plots)]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    runs = document["suites"]["learn"]["config"]["runs"]
    assert {(r["implementation"], r["seed"]) for r in runs} == {("apex", 0), ("sb3-dqn", 0)}
    for run in runs:
        assert "error" not in run, run
        assert 0 < run["end_s"] < quick_task(TASKS["CartPole-v1"]).budget_s + 60
        assert all(e[0] <= run["budget_s"] for e in run["evaluations"])
    [apex] = [r for r in runs if r["implementation"] == "apex"]
    assert isinstance(apex["updates"], int)  # the learner's at its end: past every evaluation's
    assert all(e[2] <= apex["updates"] for e in apex["evaluations"])
    assert {r["implementation"] for r in document["records"]} == {"apex", "sb3-dqn"}
    assert (plots / "learn-CartPole-v1.png").stat().st_size > 0
    assert "### learn: CartPole-v1" in learn_report.markdown(document)
    again = CliRunner().invoke(main, [*arguments, "--resume", str(out)])
    assert again.exit_code == 0, again.output
    assert "learn CartPole-v1" not in again.output  # nothing ran a second time
    assert json.loads(out.read_text())["suites"]["learn"]["config"]["runs"] == runs


@pytest.mark.slow
def test_impala_and_the_peer_s_ppo_both_train_and_evaluate_minatar_with_its_network() -> None:
    pytest.importorskip("minatar")
    pytest.importorskip("stable_baselines3")
    from bench.learning.learn_runs import run_apex, run_peer

    # The plumbing of the pixel task on both sides: the MinAtar network under IMPALA's
    # heads and under PPO's (the zoo's Atari settings), evaluated and confirmed as in the
    # benchmark. A target of 0 (every Breakout return reaches it) makes the first
    # evaluation a solve and its confirmation end the run, so neither side waits out its
    # budget, which only bounds a broken run: how soon the first evaluation comes depends
    # on the machine's load (over 30 s for the peer, with both cores busy, under CI).
    task = dataclasses.replace(
        quick_task(TASKS["impala/MinAtar/Breakout-v1"]),
        eval_every_steps=500,
        eval_episodes=2,
        target=0.0,
        confirm_episodes=2,
        budget_s=150.0,
    )
    # One actor, not the preset's two: the same network and evaluation, at half the
    # actors' CPU beside the rest of the suite.
    runs = (run_apex(task, 0, settings=("actors=1",)), run_peer(task, 0))
    for run in runs:
        assert "error" not in run, run
        assert run["evaluations"] and all(e[0] <= run["budget_s"] for e in run["evaluations"])
        assert all(np.isfinite(e[3]) and e[3] >= 0 for e in run["evaluations"])
        assert run["solved"]  # the confirmation ended it, not the budget


def test_each_side_is_warmed_once_untimed_before_its_first_timed_run(monkeypatch) -> None:
    calls = []

    def fake(name):
        def run(task, seed, keep, *rest):
            calls.append((name, seed, task.budget_s, task.target))
            return fake_run(name if name == "apex" else "sb3-dqn", seed, 5.0)

        return run

    monkeypatch.setattr(learn_suite, "run_apex", fake("apex"))
    monkeypatch.setattr(learn_suite, "run_peer", fake("peer"))
    previous = [fake_run("apex", 0, 10.0)]
    result = learn_suite.run(TASK, seeds=(0, 1), previous=previous)
    warm = (learn_suite.WARM_UP_S, None)  # a short budget and no target: it never solves
    assert calls == [
        ("apex", 1, *warm),
        ("apex", 1, TASK.budget_s, TASK.target),
        ("peer", 0, *warm),
        ("peer", 0, TASK.budget_s, TASK.target),
        ("peer", 1, TASK.budget_s, TASK.target),
    ]
    # Only timed runs are kept; a plumbing check runs without a warm-up.
    assert len(result["config"]["runs"]) == 4 and result["config"]["warm_up_s"] > 0
    calls.clear()
    learn_suite.run(TASK, seeds=(5,), implementations=("apex",), warm_up=False)
    assert calls == [("apex", 5, TASK.budget_s, TASK.target)]


@pytest.mark.parametrize(
    ("env", "keep", "stops"),
    [
        ("CartPole-v1", False, "true"),
        ("CartPole-v1", True, "false"),
        ("HalfCheetah-v5", False, "false"),
    ],
)
def test_apex_stops_at_a_solve_only_where_the_task_has_a_target(monkeypatch, env, keep, stops):
    """A task without a target compares returns at checkpoints: its runs go on to the
    budget, past the env's own threshold (HalfCheetah-v5's 4,800)."""
    from bench.learning import learn_runs

    commands = []
    monkeypatch.setattr(
        learn_runs, "spawned", lambda c, budget_s: (commands.append(c), (0.0, None))[1]
    )
    run = learn_runs.run_apex(TASKS[env], 0, keep)
    assert "error" in run  # the stand-in ran past its budget
    [command] = commands
    assert f"learner.stop_when_solved={stops}" in command
    assert ("--target-return" in command) == (TASKS[env].target is not None)


def test_the_peer_s_updates_are_its_gradient_steps_for_ppo_too() -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from bench.learning.sb3_worker import gradient_steps, without_log_folder

    # One rollout of 2 x 32 steps, 3 epochs of minibatches of 16: 4 an epoch.
    model = PPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=2, seed=0),
        n_steps=32,
        batch_size=16,
        n_epochs=3,
        seed=0,
    )
    without_log_folder(model)
    taken = []
    step = model.policy.optimizer.step
    model.policy.optimizer.step = lambda *args, **kwargs: taken.append(1) or step(*args, **kwargs)
    model.learn(total_timesteps=64)
    assert model._n_updates == 3  # SB3's own counter: epochs
    assert gradient_steps(model) == len(taken) == 12


def test_a_run_past_its_deadline_is_killed_with_every_process_it_started(tmp_path) -> None:
    """A benchmark run's roles are its supervisor's children: at the deadline the whole
    session goes, none of them left running."""
    from bench.learning.learn_runs import spawned
    from tests.conftest import wait_for

    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    task = dataclasses.replace(TASK, budget_s=0.5)
    started, completed = spawned(["bash", "-c", script], task.budget_s, grace_s=0.5)
    assert completed is None and started > 0
    child = Path(f"/proc/{int(pid_file.read_text())}/stat")

    def ended() -> bool:  # gone, or dead and waiting for init to reap it
        try:
            return child.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True

    wait_for(ended, timeout_s=10.0, what="the run's child killed with its session")


def test_a_task_s_env_arguments_reach_both_sides(monkeypatch) -> None:
    """Breakout without its trail plane: apex's command sets ``[env] kwargs``, which
    resolve to the run's env arguments, and the peer makes the same 3-plane frames."""
    pytest.importorskip("minatar")
    from bench.learning import learn_runs
    from bench.learning.sb3_worker import env_source
    from launch.config import resolve
    from launch.overrides import run_overrides

    task = TASKS["r2d2/MinAtar/Breakout-no-trail"]
    commands = []
    monkeypatch.setattr(
        learn_runs, "spawned", lambda c, budget_s: (commands.append(c), (0.0, None))[1]
    )
    learn_runs.run_apex(task, 0)
    learn_runs.run_peer(task, 0)
    apex, peer = commands
    settings = tuple(apex[i + 1] for i, part in enumerate(apex) if part == "--set")
    assert 'env.kwargs.hidden_planes=["trail"]' in settings
    config = resolve(None, run_overrides(env=task.env, settings=settings))
    assert config.algorithm == "r2d2" and config.env_kwargs == {"hidden_planes": ["trail"]}
    request = json.loads(peer[-1])
    assert request["env_kwargs"] == {"hidden_planes": ["trail"]}
    env = env_source(request["env"], request["env_kwargs"])()
    assert env.observation_space.shape == (10, 10, 3)  # paddle, ball, brick: no trail
    env.close()


def test_the_user_tasks_pay_what_their_docstring_says() -> None:
    """Catch pays +5 to a paddle that follows the ball; the corridors +1 to an answer that
    names their cues; a shortest walk to the corner pays about 0.8; heading straight for
    the goal of PointReach costs about 5."""
    import gymnasium as gym
    import numpy as np

    from bench.learning import user_envs

    catch = gym.make(f"{user_envs.__name__}:Catch-v0")
    grid, _ = catch.reset(seed=3)
    total, done = 0.0, False
    while not done:
        ball = np.argwhere(grid[:-1, :, 0])[0][1]
        paddle = np.argwhere(grid[-1, :, 0])[0][0]
        grid, reward, terminated, truncated, _ = catch.step(1 + int(np.sign(ball - paddle)))
        total, done = total + reward, terminated or truncated
    assert total == 5.0
    corridor = gym.make(f"{user_envs.__name__}:CueCorridor-v0")
    first, _ = corridor.reset(seed=4)
    cue = int(np.argmax(first[:2]))
    rewards = [corridor.step(cue)[1] for _ in range(user_envs.CORRIDOR)]
    assert sum(rewards) == 1.0 and rewards[:-1] == [0.0] * (user_envs.CORRIDOR - 1)
    two = gym.make(f"{user_envs.__name__}:TwoCues-v0")
    seen, _ = two.reset(seed=6)
    first = int(seen[0] == 1.0)
    for _ in range(3):
        seen, *_ = two.step(0)
    second = int(seen[1] == 1.0)
    rewards = [two.step(2 * first + second)[1] for _ in range(user_envs.CORRIDOR - 3)]
    assert rewards[-1] == 1.0
    walk = gym.make(f"{user_envs.__name__}:GridWalk-v0")
    grid, _ = walk.reset(seed=7)
    total, done = 0.0, False
    while not done:
        (row, column), (goal_row, goal_column) = (np.argwhere(grid[:, :, k])[0] for k in (0, 1))
        action = (
            (0 if goal_row < row else 1) if goal_row != row else (2 if goal_column < column else 3)
        )
        grid, reward, terminated, truncated, _ = walk.step(action)
        total, done = total + reward, terminated or truncated
    assert 0.6 < total <= 1.0
    reach = gym.make(f"{user_envs.__name__}:PointReach-v0")
    seen, _ = reach.reset(seed=5)
    total = 0.0
    for _ in range(user_envs.REACH_STEPS):
        heading = (seen[2:] - seen[:2]) * 10
        seen, reward, *_ = reach.step(np.clip(heading, -1, 1).astype(np.float32))
        total += reward
    assert -10.0 < total < 0.0
