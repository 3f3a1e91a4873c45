"""One run of the learning benchmark: one seed of one implementation on one task, timed
from the moment the benchmark spawns it, under the same rule on both sides (cadence in
env steps, confirmation, budget; ``bench.learn_tasks``).

A run is a plain dict, what the record keeps per seed::

    {"implementation", "seed", "budget_s", "git",
     "solved", "solve_s", "solve_env_steps", "solve_updates",    # None when unsolved
     "evaluations": [[s, env steps, updates, mean], ...],        # periodic, in order
     "confirmations": [[s, env steps, updates, mean], ...],
     "end_s", "error" (only when it failed)}

Times are seconds since spawning; updates are the learner's (SB3: gradient steps) behind
the weights evaluated.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from apex.metrics import read_metrics
from bench.learn_tasks import Task
from bench.machine import git_commit
from bench.workers import REPO_ROOT, worker_env

# Past its budget a run gets this long to write its last records and exit.
GRACE_S = 120.0


def _solve_fields(confirmations: list[list[float]], target: float | None) -> dict:
    first = next((c for c in confirmations if target is not None and c[3] >= target), None)
    if first is None:
        return {"solved": False, "solve_s": None, "solve_env_steps": None, "solve_updates": None}
    return {"solved": True, "solve_s": first[0], "solve_env_steps": int(first[1]),
            "solve_updates": None if first[2] is None else int(first[2])}  # fmt: skip


def _within(events: list[list[float]], budget_s: float) -> list[list[float]]:
    return [event for event in events if event[0] <= budget_s]


def run_apex(
    task: Task, seed: int, keep_training: bool = False, settings: tuple[str, ...] = ()
) -> dict:
    """``apex train`` on ``task`` with ``seed``, its evaluations read from its metrics;
    ``settings``: more ``--set KEY=VALUE`` (a preset being tuned, on seeds 100 and up)."""
    base = {"implementation": "apex", "seed": seed, "budget_s": task.budget_s,
            "git": git_commit(REPO_ROOT), "settings": list(settings)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="apex-learn-") as directory:
        run_dir = Path(directory) / "run"
        command = [
            sys.executable, "-m", "launch", "train", "--env", task.env, "--seed", str(seed),
            "--max-time", str(task.budget_s), "--run-dir", str(run_dir), "--plain",
            "--set", f"learner.eval_every_steps={task.eval_every_steps}",
            "--set", f"learner.eval_episodes={task.eval_episodes}",
            "--set", f"learner.confirm_episodes={task.confirm_episodes}",
            "--set", f"learner.stop_when_solved={'false' if keep_training else 'true'}",
            *(part for setting in settings for part in ("--set", setting)),
        ]  # fmt: skip
        if task.target is not None:
            command += ["--target-return", str(task.target)]
        spawned = time.time()
        try:
            completed = subprocess.run(command, cwd=REPO_ROOT, env=worker_env(),
                                       capture_output=True, text=True,
                                       timeout=task.budget_s + GRACE_S, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return {**base, "error": f"apex train ran past {task.budget_s + GRACE_S:.0f} s"}
        end_s = time.time() - spawned
        if completed.returncode != 0 or not (run_dir / "metrics.jsonl").exists():
            tail = completed.stdout.strip().splitlines()[-1:] or ["no output"]
            return {**base, "error": f"apex train exited {completed.returncode}: {tail[0]}"}
        records = read_metrics(run_dir)

    def events(kind: str) -> list[list[float]]:
        return [[r["unix_s"] - spawned, r["env_steps"], r.get("weights_updates"),
                 r["eval_return_mean"]] for r in records if r.get("event") == kind]  # fmt: skip

    evaluations = _within(events("evaluation"), task.budget_s)
    confirmations = _within(events("confirmation"), task.budget_s)
    return {**base, **_solve_fields(confirmations, task.target), "evaluations": evaluations,
            "confirmations": confirmations, "end_s": end_s}  # fmt: skip


def run_peer(task: Task, seed: int, keep_training: bool = False) -> dict:
    """The peer (``bench.sb3_worker``) on ``task`` with ``seed``."""
    base = {"implementation": task.peer, "seed": seed, "budget_s": task.budget_s,
            "git": git_commit(REPO_ROOT)}  # fmt: skip
    request = {
        "env": task.env, "seed": seed, "max_seconds": task.budget_s,
        "max_steps": task.peer_max_steps, "eval_every_steps": task.eval_every_steps,
        "eval_episodes": task.eval_episodes, "confirm_episodes": task.confirm_episodes,
        "target_return": task.target, "stop_when_solved": not keep_training,
        "torch_threads": 2,
    }  # fmt: skip
    spawned = time.time()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "bench.sb3_worker", json.dumps(request)], cwd=REPO_ROOT,
            env=worker_env(), capture_output=True, text=True,
            timeout=task.budget_s + GRACE_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {**base, "error": f"the peer ran past {task.budget_s + GRACE_S:.0f} s"}
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
        return {**base, "error": f"the peer exited {completed.returncode}: {tail[0]}"}
    result = json.loads(lines[-1])

    def since_spawn(events: list[list[float]]) -> list[list[float]]:
        return _within([[t - spawned, *rest] for t, *rest in events], task.budget_s)

    confirmations = since_spawn(result["confirmations"])
    return {**base, **_solve_fields(confirmations, task.target),
            "evaluations": since_spawn(result["evaluations"]), "confirmations": confirmations,
            "end_s": result["ended_unix"] - spawned}  # fmt: skip
