"""The scaling benchmark's single-node baseline: the learning suite's single-process peer,
stable-baselines3's DQN with the rl-zoo's settings for the task's env, on one node's worth
of the task's env copies (as many as this machine has cores, each stepping in a process
of its own), under the same evaluation rule and target.

Its time to a solve is in the same units as apex's: training seconds at the weights the
confirmation played, from the start of learning, with every evaluation's time left out
(SB3 evaluates inline; apex's evaluator is a process of its own). Its evaluations play the
env without the step cost, which is latency and changes no episode.

A run is a plain dict, what the record keeps per seed::

    {"peer", "seed", "copies", "budget_s", "git",
     "solved", "solve_s", "solve_env_steps",                      # None when unsolved
     "evaluations": [[s, env steps, updates, mean], ...],        # s: training seconds
     "confirmations": [[s, env steps, updates, mean], ...],
     "env_steps", "train_s", "wall_s", "error" (only when it failed)}
"""

from __future__ import annotations

import json
import sys

from bench.learning.learn_runs import spawned
from bench.learning.sb3_worker import DQN_ZOO
from bench.machine import git_commit
from bench.scaling.scaling_tasks import ScalingTask
from bench.workers import REPO_ROOT

PEER = "sb3-dqn"


def request(task: ScalingTask, seed: int, copies: int) -> dict:
    """What ``bench.learning.sb3_worker`` is asked to run."""
    if task.env not in DQN_ZOO:
        raise ValueError(f"the baseline's DQN has no rl-zoo settings for {task.env}")
    return {
        "env": task.env,
        "seed": seed,
        "max_seconds": task.budget_s,
        "max_steps": 10**9,  # the budget ends it
        "eval_every_steps": task.eval_every_steps,
        "eval_episodes": task.eval_episodes,
        "confirm_episodes": task.confirm_episodes,
        "target_return": task.target,
        "stop_when_solved": True,
        "torch_threads": 1,
        "algorithm": "dqn",
        "step_cost": {"cost_s": task.cost_s, "cost_kind": task.cost_kind},
        "env_copies": copies,
        "env_stepping": "processes",
    }


def _trained(events: list[list]) -> list[list]:
    """Events as ``[training s, env steps, updates, mean]`` (the worker's fifth field)."""
    return [[event[4], *event[1:4]] for event in events if event[4] is not None]


def run_baseline(task: ScalingTask, seed: int, cores: int) -> dict:
    """One seed of the baseline on ``cores`` env copies, within the task's budget (wall
    time, evaluations included: SB3's evaluations are part of its run)."""
    base = {
        "peer": PEER,
        "seed": seed,
        "copies": cores,
        "budget_s": task.budget_s,
        "git": git_commit(REPO_ROOT),
    }
    work = json.dumps(request(task, seed, cores))
    command = [sys.executable, "-m", "bench.learning.sb3_worker", work]
    started, completed = spawned(command, task.budget_s)
    if completed is None:
        return {**base, "error": "the baseline ran past its budget and grace"}
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
        return {**base, "error": f"the baseline exited {completed.returncode}: {tail[0]}"}
    result = json.loads(lines[-1])
    confirmations = _trained(result["confirmations"])
    solve = next((c for c in confirmations if c[3] >= task.target), None)
    return {
        **base,
        "solved": bool(result["solved"]) and solve is not None,
        "solve_s": solve[0] if solve else None,
        "solve_env_steps": int(solve[1]) if solve else None,
        "evaluations": _trained(result["evaluations"]),
        "confirmations": confirmations,
        "env_steps": result["env_steps"],
        "train_s": result["ended_unix"] - result["learn_started_unix"],
        "wall_s": result["ended_unix"] - started,
    }
