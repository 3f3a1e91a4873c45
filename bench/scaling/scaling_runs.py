"""One run of the scaling benchmark: ``apex train`` of a scaling task with N actors and one
seed, and what its run directory says about it.

A run is a plain dict, what the record keeps per (actors, seed)::

    {"actors", "seed", "budget_s", "git",
     "solved", "solve_s", "solve_heard_s",          # training seconds; None when unsolved
     "solve_env_steps", "solve_updates",
     "evaluations": [[s, env steps, updates, mean], ...],   # s: the weights' publication
     "confirmations": [[s, env steps, updates, mean], ...],
     "wall_s",                                        # from spawn to exit
     "throughput": {...},                             # :func:`throughput`
     "machine_busy_cores",                            # this machine's, over the run
     "error" (only when it failed)}

A solve is timed in the learner's training seconds at the publication of the weights its
confirmation played (``apex.learning.solving``): the evaluator's latency is not in it, and
neither is the start of the run's processes before the learner's clock begins.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from apex.learning.metrics import read_metrics
from bench.learning.learn_runs import GRACE_S, spawned
from bench.machine import git_commit
from bench.scaling.scaling_tasks import ScalingTask
from bench.workers import REPO_ROOT
from launch.supervision.processes import machine_cpu_seconds
from launch.views.binding import (
    inserts_held,
    rate_between,
    samples_waited,
    shard_cores,
    training_records,
)


def busy_cores(before: tuple[float, float], after: tuple[float, float], cores: int) -> float:
    """Cores busy on average between two ``machine_cpu_seconds`` readings."""
    total = after[1] - before[1]
    return cores * (after[0] - before[0]) / total if total > 0 else 0.0


def throughput(records: list[dict]) -> dict:
    """What the progress records of one run's training say, each figure over the window
    from the first progress record after the first update that has heard every actor (or
    the first after the first update, where none has) to the last one:

    - ``env_steps_per_s``, ``updates_per_s``: the actors' env steps and the learner's
      updates per second;
    - ``learner_cores``, ``shard_cores``: CPU cores the learner and the shards used;
    - ``inserts_held``: the share of records in which a shard's rate limiter held the
      actors' inserts (the learner was behind); ``samples_waited``: the share in which
      the learner's requests waited for data (the actors were behind);
    - ``policy_lag_p50``: the median of the records' median policy lag (versions);
    - ``replay_fill``: the replay's fill at the end;
    - ``first_update_s``: training seconds to the learner's first update;
    - ``all_actors_heard_s``: training seconds to the first progress record that has
      heard every actor: on a machine of few cores, many actor processes start one after
      another while the learner's clock runs.
    """
    progress = training_records([r for r in records if r.get("event") == "progress"])
    if len(progress) < 2:
        return {}
    start = next((r for r in records if r.get("event") == "start"), {})
    actors = start.get("actor_processes")
    heard = next(
        (r["time_s"] for r in progress if actors and (r.get("actors_heard") or 0) >= actors), None
    )
    first_update = next((r["time_s"] for r in records if r.get("event") == "first_update"), None)
    # Rates from the moment every actor is running: 256 processes start over a minute on
    # two cores, and a window that holds their start is not the rate they keep.
    steady = [r for r in progress if heard is not None and r["time_s"] >= heard]
    window = steady if len(steady) >= 2 else progress
    first, last = window[0], window[-1]
    lags = [r["policy_lag_median"] for r in progress if r.get("policy_lag_median") is not None]
    capacity = sum(s.get("capacity") or 0 for s in last["shards"])
    return {
        "window_s": last["time_s"] - first["time_s"],
        "env_steps_per_s": rate_between(last, first, "env_steps"),
        "updates_per_s": rate_between(last, first, "updates"),
        "learner_cores": rate_between(last, first, "learner_cpu_s"),
        "shard_cores": sum(shard_cores(first, last)),
        "inserts_held": statistics.fmean(map(inserts_held, progress)),
        "samples_waited": statistics.fmean(map(samples_waited, progress)),
        "policy_lag_p50": statistics.median(lags) if lags else None,
        "replay_fill": sum(s.get("size") or 0 for s in last["shards"]) / capacity
        if capacity
        else None,
        "first_update_s": first_update,
        "all_actors_heard_s": heard,
    }


def _events(records: list[dict], kind: str) -> list[list]:
    """A run's evaluations (or confirmations) as ``[s, env steps, updates, mean]``, timed at
    the publication of the weights they played (when it heard them where not known)."""
    return [
        [
            r["weights_time_s"] if r.get("weights_time_s") is not None else r["time_s"],
            r["env_steps"],
            r.get("weights_updates"),
            r["eval_return_mean"],
        ]
        for r in records
        if r.get("event") == kind
    ]


def read_run(run_dir: Path, task: ScalingTask, outcome: dict | None = None) -> dict:
    """What a finished run directory says: its solve, evaluations and throughput; with
    the learner's ``outcome`` where it is not in the run's ``summary.json`` (a Slurm job
    has none: its learner prints the outcome to the job's output)."""
    records = read_metrics(run_dir)
    summary = {} if outcome is not None else json.loads((run_dir / "summary.json").read_text())
    outcome = outcome if outcome is not None else summary.get("outcome") or {}
    confirmations = _events(records, "confirmation")
    solve = next((c for c in confirmations if c[3] >= task.target), None)
    solved = bool(outcome.get("solved")) and solve is not None
    return {
        "solved": solved,
        "solve_s": outcome.get("solved_at_s") if solved else None,
        "solve_heard_s": outcome.get("solve_heard_at_s") if solved else None,
        "solve_env_steps": int(solve[1]) if solved else None,
        "solve_updates": solve[2] if solved else None,
        "evaluations": _events(records, "evaluation"),
        "confirmations": confirmations,
        "train_s": outcome.get("train_seconds"),
        "updates": outcome.get("updates"),
        "reason": summary.get("reason", outcome.get("reason")),
        "throughput": throughput(records),
    }


def run_base(task: ScalingTask, actors: int, seed: int) -> dict:
    """What a run's record says of it before it runs: its count, seed and settings."""
    return {
        "actors": actors,
        "seed": seed,
        "budget_s": task.budget_s,
        "batch_size": task.batch_size(actors),
        "throughput_only": task.throughput_only,
        "git": git_commit(REPO_ROOT),
    }


def run_point(task: ScalingTask, actors: int, seed: int, cores: int) -> dict:
    """``apex train`` of ``task`` with ``actors`` actor processes and ``seed``."""
    base = run_base(task, actors, seed)
    with tempfile.TemporaryDirectory(prefix="apex-scaling-") as directory:
        run_dir = Path(directory) / "run"
        command = [
            sys.executable,
            "-m",
            "launch",
            "train",
            *task.run_arguments(seed, str(run_dir)),
            "--actors",
            str(actors),
            "--plain",
            "--no-curves",
            *(part for setting in task.train_settings(actors) for part in ("--set", setting)),
        ]
        before = machine_cpu_seconds()
        started, completed = spawned(command, task.budget_s + GRACE_S)
        base["machine_busy_cores"] = busy_cores(before, machine_cpu_seconds(), cores)
        if completed is None:
            return {**base, "error": f"apex train ran past {task.budget_s + 2 * GRACE_S:.0f} s"}
        base["wall_s"] = time.time() - started
        if completed.returncode != 0 or not (run_dir / "summary.json").exists():
            tail = completed.stdout.strip().splitlines()[-1:] or ["no output"]
            return {**base, "error": f"apex train exited {completed.returncode}: {tail[0]}"}
        return {**base, **read_run(run_dir, task)}
