"""One run of the learning benchmark: one seed of one implementation on one task, timed
from the moment the benchmark spawns it, under the same rule on both sides (cadence in
env steps, confirmation, budget; ``bench.learning.learn_tasks``).

A run is a plain dict, what the record keeps per seed::

    {"implementation", "seed", "budget_s", "git",
     "solved", "solve_s", "solve_env_steps", "solve_updates",    # None when unsolved
     "evaluations": [[s, env steps, updates, mean], ...],        # periodic, in order
     "confirmations": [[s, env steps, updates, mean], ...],
     "end_s", "error" (only when it failed),
     "updates"}                                 # apex only: the learner's at its end

Times are seconds since spawning; updates are the learner's (SB3: gradient steps) behind
the weights evaluated.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from apex.learning.metrics import read_metrics
from bench.learning.learn_tasks import Task
from bench.machine import git_commit
from bench.workers import REPO_ROOT, worker_env

# Past its budget a run gets this long to write its last records and exit.
GRACE_S = 120.0


def _solve_fields(confirmations: list[list[float]], target: float | None) -> dict:
    first = next((c for c in confirmations if target is not None and c[3] >= target), None)
    if first is None:
        return {"solved": False, "solve_s": None, "solve_env_steps": None, "solve_updates": None}
    return {
        "solved": True,
        "solve_s": first[0],
        "solve_env_steps": int(first[1]),
        "solve_updates": None if first[2] is None else int(first[2]),
    }


def spawned(
    command: list[str], budget_s: float, grace_s: float = GRACE_S
) -> tuple[float, subprocess.CompletedProcess | None]:
    """Runs ``command`` from the repository, timed from its spawn (``time.time()``); the
    completed process, or None when it ran past ``budget_s`` and its grace. It runs in a
    session of its own, all of which is killed at the deadline: a run's roles are its
    children, and killing the supervisor alone would leave them running."""
    started = time.time()
    with subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=worker_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=budget_s + grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return started, None
    return started, subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _run(
    base: dict, task: Task, spawned: float, evaluations: list, confirmations: list, ended: float
) -> dict:
    """A finished run: events given as ``[unix time, env steps, updates, mean]``, timed
    from ``spawned`` and kept up to the budget."""

    def within_budget(events: list[list[float]]) -> list[list[float]]:
        timed = ([t - spawned, *rest] for t, *rest in events)
        return [event for event in timed if event[0] <= task.budget_s]

    confirmations = within_budget(confirmations)
    return {
        **base,
        **_solve_fields(confirmations, task.target),
        "evaluations": within_budget(evaluations),
        "confirmations": confirmations,
        "end_s": ended - spawned,
    }


def run_apex(
    task: Task, seed: int, keep_training: bool = False, settings: tuple[str, ...] = ()
) -> dict:
    """``apex train`` on ``task`` with ``seed``, its evaluations read from its metrics;
    ``settings``: more ``--set KEY=VALUE`` (a preset being tuned, on seeds 100 and up)."""
    base = {
        "implementation": "apex",
        "seed": seed,
        "budget_s": task.budget_s,
        "git": git_commit(REPO_ROOT),
        "settings": list(settings),
    }
    stops = task.target is not None and not keep_training
    with tempfile.TemporaryDirectory(prefix="apex-learn-") as directory:
        run_dir = Path(directory) / "run"
        command = [
            sys.executable,
            "-m",
            "launch",
            "train",
            "--env",
            task.env,
            "--seed",
            str(seed),
            "--max-time",
            str(task.budget_s),
            "--run-dir",
            str(run_dir),
            "--plain",
            "--no-curves",
            "--set",
            f"learner.eval_every_steps={task.eval_every_steps}",
            "--set",
            f"learner.eval_episodes={task.eval_episodes}",
            "--set",
            f"learner.confirm_episodes={task.confirm_episodes}",
            # A task without a target (returns at checkpoints) must not stop at the env's
            # own threshold (HalfCheetah-v5's 4,800 ended a 20-minute run at 444 s).
            "--set",
            f"learner.stop_when_solved={'true' if stops else 'false'}",
            *(part for setting in (*task.apex_settings, *settings) for part in ("--set", setting)),
            # A JSON value of strings, numbers, booleans and lists of them is TOML's too.
            *(
                part
                for key, value in task.env_kwargs
                for part in ("--set", f"env.kwargs.{key}={json.dumps(value)}")
            ),
        ]
        if task.target is not None:
            command += ["--target-return", str(task.target)]
        spawned_at, completed = spawned(command, task.budget_s)
        ended = time.time()
        if completed is None:
            return {**base, "error": f"apex train ran past {task.budget_s + GRACE_S:.0f} s"}
        if completed.returncode != 0 or not (run_dir / "metrics.jsonl").exists():
            tail = completed.stdout.strip().splitlines()[-1:] or ["no output"]
            return {**base, "error": f"apex train exited {completed.returncode}: {tail[0]}"}
        records = read_metrics(run_dir)

    def events(kind: str) -> list[list[float]]:
        return [
            [r["unix_s"], r["env_steps"], r.get("weights_updates"), r["eval_return_mean"]]
            for r in records
            if r.get("event") == kind
        ]

    end = next((r for r in records if r.get("event") == "end"), {})
    base["updates"] = end.get("updates")
    return _run(base, task, spawned_at, events("evaluation"), events("confirmation"), ended)


def run_peer(task: Task, seed: int, keep_training: bool = False) -> dict:
    """The peer (``bench.learning.sb3_worker``) on ``task`` with ``seed``."""
    base = {
        "implementation": task.peer,
        "seed": seed,
        "budget_s": task.budget_s,
        "git": git_commit(REPO_ROOT),
    }
    request = {
        "env": task.env,
        "seed": seed,
        "max_seconds": task.budget_s,
        "max_steps": task.peer_max_steps,
        "eval_every_steps": task.eval_every_steps,
        "eval_episodes": task.eval_episodes,
        "confirm_episodes": task.confirm_episodes,
        "target_return": task.target,
        "stop_when_solved": not keep_training,
        "torch_threads": 2,
        "algorithm": task.peer.removeprefix("sb3-"),
        "env_kwargs": dict(task.env_kwargs),
    }
    command = [sys.executable, "-m", "bench.learning.sb3_worker", json.dumps(request)]
    spawned_at, completed = spawned(command, task.budget_s)
    if completed is None:
        return {**base, "error": f"the peer ran past {task.budget_s + GRACE_S:.0f} s"}
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
        return {**base, "error": f"the peer exited {completed.returncode}: {tail[0]}"}
    result = json.loads(lines[-1])
    return _run(
        base, task, spawned_at, result["evaluations"], result["confirmations"], result["ended_unix"]
    )
