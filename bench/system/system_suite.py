"""System suite: the whole of `apex train` on one machine, as actors and shards grow.

For every (actors, shards) pair a real run trains CartPole-v1 with the preset's settings
but ``ENVS_PER_ACTOR`` envs per actor, so the sweep means the same as the preset changes
(evaluation off, no target). After a warm-up, this process reads the learner's metrics
(transitions/s ingested, updates/s, policy lag) and the CPU time of every role from
``/proc`` over a timed window. The report names the bottleneck of each configuration:

* ``learner`` when the learner uses at least ``BUSY_SHARE`` of one core (one Python
  thread trains and, on the CPU, drives the replay I/O, so one core is what it can use);
* ``shard`` when a shard process uses at least ``BUSY_SHARE`` of a core;
* ``machine`` when all roles together keep the machine's cores busy;
* ``actors`` otherwise (the others wait for data).

CartPole actors act in numpy and hold about 106 MB each (measured RSS); the actor counts
are capped by memory (``MEMORY_PER_ACTOR_BYTES``, with headroom); a count above the cap is
reported unavailable, with the arithmetic.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from apex.learning.metrics import read_metrics
from bench.workers import REPO_ROOT, worker_env
from launch.supervision.processes import cpu_seconds, resident_bytes, run_processes

SUITE = "system"
MEMORY_PER_ACTOR_BYTES = 160 * 2**20
MEMORY_SHARE = 0.5
BUSY_SHARE = 0.85
LEARNER_CORES = 1.0  # one Python thread trains and drives the replay I/O
START_TIMEOUT_S = 180.0

# Envs per actor process, fixed here (not the preset's) so sweeps compare across time.
ENVS_PER_ACTOR = 4


def _cpu_by_role(run_dir: Path) -> dict[str, float]:
    totals: dict[str, float] = {}
    for pid, role in run_processes(run_dir).items():
        if role == "train":
            continue
        seconds = cpu_seconds(pid)
        if seconds is not None:
            totals[role] = totals.get(role, 0.0) + seconds
    return totals


def _rss_by_role(run_dir: Path) -> dict[str, list[int]]:
    """Resident set size of every process of the run, in bytes, by role."""
    sizes: dict[str, list[int]] = {}
    for pid, role in run_processes(run_dir).items():
        resident = resident_bytes(pid)
        if resident is not None:
            sizes.setdefault(role, []).append(resident)
    return sizes


def _wait_for_progress(run_dir: Path, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"apex train exited with {process.returncode} before training")
        if any(r.get("event") == "progress" for r in read_metrics(run_dir)):
            return
        time.sleep(0.2)
    raise TimeoutError("no training progress in time")


def _first_update_s(run_dir: Path, launched_unix_s: float) -> float | None:
    """Seconds from the command to the learner's first update (its ``first_update``
    record carries the wall clock)."""
    firsts = [r for r in read_metrics(run_dir) if r.get("event") == "first_update"]
    return firsts[0]["unix_s"] - launched_unix_s if firsts else None


def measure_training(
    arguments: Sequence[str],
    seconds: float,
    warm_up_s: float,
    ready: Callable[[Path], None] | None = None,
) -> dict:
    """``apex train`` with ``arguments`` more, no evaluation and no target, measured over a
    window of ``seconds`` after its first progress record and ``warm_up_s`` (``ready`` is
    called with its run directory before the warm-up): each role's cores over the window
    (``cpu``), the progress records in it (``window``), every process's resident memory by
    role (``rss``), and the seconds from the command to the first update."""
    with tempfile.TemporaryDirectory(prefix="apex-measured-") as directory:
        run_dir = Path(directory) / "run"
        command = [
            sys.executable,
            "-m",
            "launch",
            "train",
            *arguments,
            "--max-time",
            str(START_TIMEOUT_S + warm_up_s + seconds + 30),
            "--target-return",
            "1e12",
            "--set",
            "learner.eval_every_steps=0",
            "--no-curves",
            "--run-dir",
            str(run_dir),
        ]
        launched = time.time()
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=worker_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_for_progress(run_dir, process, START_TIMEOUT_S)
            if ready:
                ready(run_dir)
            time.sleep(warm_up_s)
            window_start = time.monotonic()
            cpu_before = _cpu_by_role(run_dir)
            time.sleep(seconds)
            cpu_after = _cpu_by_role(run_dir)
            elapsed = time.monotonic() - window_start
            rss = _rss_by_role(run_dir)
        finally:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        records = read_metrics(run_dir)
        first_update_s = _first_update_s(run_dir, launched)
    end_time = max((r.get("time_s") or 0) for r in records)
    window = [
        r
        for r in records
        if r.get("event") == "progress" and r.get("time_s", 0) >= end_time - elapsed
    ]
    cpu = {
        role: max(cpu_after.get(role, 0.0) - cpu_before.get(role, 0.0), 0.0) / elapsed
        for role in ("learner", "shard", "actor")
    }
    return {"window": window, "cpu": cpu, "rss": rss, "first_update_s": first_update_s}


def _values(window: list[dict], key: str, positive: bool = True) -> list[float]:
    values = [r[key] for r in window if r.get(key) is not None]
    return [v for v in values if v > 0] if positive else values


def _bottleneck(cpu: dict[str, float], shards: int, cores: int) -> str:
    if sum(cpu.values()) >= BUSY_SHARE * cores:
        return f"machine ({sum(cpu.values()):.2f} of {cores} cores busy)"
    if cpu["learner"] >= BUSY_SHARE * min(LEARNER_CORES, cores):
        return "learner"
    if cpu["shard"] / shards >= BUSY_SHARE:
        return "shard"
    return "actors"


def run(
    *,
    quick: bool = False,
    actor_counts: Sequence[int] | None = None,
    shard_counts: Sequence[int] | None = None,
    envs_per_actor: int = ENVS_PER_ACTOR,
    layouts: Sequence[tuple[int, int]] = (),
    seconds_per_window: float | None = None,
    memory_bytes: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    actor_counts = tuple(actor_counts or ((2,) if quick else (1, 2, 4, 8, 16, 32, 64)))
    shard_counts = tuple(shard_counts or ((1,) if quick else (1, 2, 4)))
    seconds = seconds_per_window or (3.0 if quick else 12.0)
    warmup_s = 1.0 if quick else 3.0
    cores = os.cpu_count() or 1
    cap = (
        int(MEMORY_SHARE * memory_bytes / MEMORY_PER_ACTOR_BYTES)
        if memory_bytes
        else max(actor_counts)
    )
    # (processes, envs per process): the explicit layouts, else every actor count.
    layouts = tuple(layouts) or tuple((actors, envs_per_actor) for actors in actor_counts)
    records = []
    for shards in shard_counts:
        for actors, envs in layouts:
            case = f"actors{actors}-shards{shards}" + (
                f"-envs{envs}" if envs != ENVS_PER_ACTOR else ""
            )
            params = {
                "actors": actors,
                "shards": shards,
                "envs_per_actor": envs,
                "ape_x_actors": actors * envs,
                "window_s": seconds,
                "env": "CartPole-v1",
            }
            base = {"suite": SUITE, "case": case, "implementation": "apex", "params": params}
            if actors > cap:
                reason = (
                    f"{actors} actors × {MEMORY_PER_ACTOR_BYTES >> 20} MiB > {MEMORY_SHARE:.0%} of "
                    f"{(memory_bytes or 0) >> 30} GiB: at most {cap} actor processes fit"
                )
                records.append({**base, "status": "unavailable", "reason": reason})
                continue
            if progress:
                progress(f"system {case}")
            try:
                arguments = [
                    "--actors",
                    str(actors),
                    "--shards",
                    str(shards),
                    "--envs-per-actor",
                    str(envs),
                ]
                measured = measure_training(arguments, seconds, warmup_s)
            except (RuntimeError, TimeoutError) as exc:
                records.append({**base, "status": "unavailable", "reason": str(exc)})
                continue
            window, cpu = measured["window"], measured["cpu"]
            params = {
                **params,
                "cpu_cores_by_role": cpu,
                "bottleneck": _bottleneck(cpu, shards, cores),
            }
            figures = {
                "transitions_in": ("transitions/s", _values(window, "transitions_per_s")),
                "updates": ("updates/s", _values(window, "updates_per_s")),
                "samples": ("transitions/s", _values(window, "samples_per_s")),
                "policy_lag_p50": (
                    "versions",
                    _values(window, "policy_lag_median", positive=False),
                ),
            }
            for role, cores_used in cpu.items():
                figures[f"cpu_{role}"] = ("cores", [cores_used])
            for role, sizes in measured["rss"].items():
                figures[f"rss_per_{role}"] = ("MB", [size / 2**20 for size in sizes])
            if measured["first_update_s"] is not None:
                figures["first_update"] = ("s from the command", [measured["first_update_s"]])
            for metric, (unit, values) in figures.items():
                if not values:
                    continue
                records.append(
                    {
                        **base,
                        "params": params,
                        "status": "ok",
                        "metric": metric,
                        "unit": unit,
                        "median": float(np.median(values)),
                        "min": float(min(values)),
                        "max": float(max(values)),
                        "repeats": len(values),
                    }
                )
    config = {
        "quick": quick,
        "layouts": [list(layout) for layout in layouts],
        "shard_counts": list(shard_counts),
    }
    return {
        "records": records,
        "ratios": [],
        "config": {**config, "window_s": seconds, "actor_cap": cap},
    }
