"""Soak: one long ``apex train`` under a schedule of faults, its processes sampled throughout,
and at the end an account of every transition.

The run: CartPole whose user env raises and returns NaN now and then and hangs once
(``bench.faults.faulty_envs:ChaoticCartPole-v0``), ``actors`` actor processes, 2 shards,
snapshots and checkpoints every ``PERIOD_S``, a watchdog of ``STEP_TIMEOUT_S``, trained for
``seconds`` with ``learner.stop_when_solved = false`` (it evaluates, and is judged by
whether it reached the target, all along). The faults, drawn from ``seed`` before it
starts: every ``kill_every_s`` a kill -9 of a random role (an actor, a shard or the
learner), and once, a third of the way in, a shard stopped (SIGSTOP) for ``STOP_S``.

Sampled every ``sample_every_s``: each process's RSS and open file descriptors (by PID,
so a restarted role is a new life), the run directory's bytes by part (checkpoints,
replay snapshots, metrics, logs, and the largest log with its rotated parts), and the
learner's latest rates. The metrics and logs are rotated at sizes far below their
defaults (``METRICS_MAX_MB``, ``LOG_MAX_MB``), so that an hour shows them bounded.

Figures: per role, the largest RSS growth of a life from the end of its warm-up
(``WARMUP_S`` into it) to its last sample, over lives sampled at least ``LONG_LIFE_S``
after warm-up; the most open files a life had after warm-up above those it had when its
warm-up ended (a leak grows; a restarted peer's connections dip for a few seconds, which
the spread, also kept, counts); the run
directory's bytes by part at the end and their growth per hour over the second half; and
the delivery account: transitions sent, stored, lost and in transit, against what the
faults may lose by design (a killed actor: its credit window of ``MAX_WINDOW`` insert
batches; a killed shard: what it took since its newest snapshot, at most ``PERIOD_S`` of
the run's intake). ``unaccounted`` is what was lost beyond that.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from apex.learning.file_parts import KEPT_PARTS
from apex.learning.metrics import read_metrics
from bench.report import ok_record
from bench.workers import REPO_ROOT, worker_env
from launch.supervision.processes import run_processes
from replay.server.credit_desk import MAX_WINDOW

SUITE = "soak"
ENV = "bench.faults.faulty_envs:ChaoticCartPole-v0"
PERIOD_S = 60.0
STEP_TIMEOUT_S = 20.0
STOP_S = 20.0
WARMUP_S = 300.0
LONG_LIFE_S = 600.0
INSERT_BATCH = 50  # actor.insert_batch's default: the credit window's unit
# A process's copies hang once they took HANG_AFTER steps in all: minutes into the run.
RAISE_RATE, NAN_RATE, HANG_AFTER = 1e-4, 1e-4, 200_000
END_GRACE_S = 300.0
# Rotation sizes an hour goes past several times (the run writes about 5 MB of metrics).
METRICS_MAX_MB, LOG_MAX_MB = 1.0, 0.1


def schedule(seconds: float, kill_every_s: float, seed: int) -> list[tuple[float, str]]:
    """The faults, ``(seconds into the run, what)``: a kill of a random role every
    ``kill_every_s`` (its kind drawn now, its process when it comes), and one shard
    stopped a third of the way in."""
    rng = random.Random(seed)
    faults = [
        (t, f"kill-{rng.choice(['actor', 'actor', 'shard', 'learner'])}")
        for t in _every(kill_every_s, seconds - kill_every_s / 2)
    ]
    faults.append((seconds / 3 + kill_every_s / 2, "stop-shard"))
    return sorted(faults)


def _every(step: float, until: float) -> list[float]:
    return [step * k for k in range(1, int(until // step) + 1)]


class Soak:
    """The run and its watchers."""

    def __init__(self, root: Path, seconds: float, actors: int, progress) -> None:
        self.run_dir = root / "run"
        self.output = root / "train.out"
        self.progress = progress
        kwargs = (
            f"env.kwargs={{raise_rate={RAISE_RATE}, nan_rate={NAN_RATE}, "
            f'marker="{root / "hung"}", after={HANG_AFTER}}}'
        )
        command = [
            sys.executable,
            "-m",
            "launch",
            "train",
            "--env",
            ENV,
            "--actors",
            str(actors),
            "--shards",
            "2",
            "--max-time",
            str(seconds),
            "--run-dir",
            str(self.run_dir),
            "--plain",
            "--no-curves",
            "--set",
            kwargs,
            "--set",
            "learner.stop_when_solved=false",
            "--set",
            f"actor.step_timeout_s={STEP_TIMEOUT_S}",
            "--set",
            f"learner.checkpoint_interval_s={PERIOD_S}",
            "--set",
            f"replay.snapshot_interval_s={PERIOD_S}",
            "--set",
            f"learner.metrics_max_mb={METRICS_MAX_MB}",
            "--set",
            f"log_max_mb={LOG_MAX_MB}",
        ]
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=worker_env(), stdout=out, stderr=subprocess.STDOUT
            )
        self.started = time.monotonic()
        self.samples: list[dict] = []
        self.faults: list[dict] = []
        self._done = threading.Event()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def sample(self) -> None:
        """One sample of every process and of the run directory."""
        processes = {}
        for pid, role in run_processes(self.run_dir).items():
            figures = _process_figures(pid)
            if figures is not None:
                processes[str(pid)] = {"role": role, **figures}
        progress = [r for r in read_metrics(self.run_dir) if r.get("event") == "progress"]
        latest = progress[-1] if progress else {}
        self.samples.append(
            {
                "time_s": round(self.elapsed(), 1),
                "processes": processes,
                "disk": _disk_parts(self.run_dir),
                "updates_per_s": latest.get("updates_per_s"),
                "transitions_per_s": latest.get("transitions_per_s"),
            }
        )

    def strike(self, what: str, rng: random.Random) -> None:
        """One fault of the schedule, now."""
        role = what.split("-", 1)[1]
        pids = sorted(pid for pid, r in run_processes(self.run_dir).items() if r == role)
        if not pids:
            self.faults.append(
                {
                    "time_s": round(self.elapsed(), 1),
                    "fault": what,
                    "pid": None,
                    "note": f"no live {role}",
                }
            )
            return
        pid = rng.choice(pids)
        self.faults.append({"time_s": round(self.elapsed(), 1), "fault": what, "pid": pid})
        self.progress(f"{self.elapsed():.0f} s: {what} (pid {pid})")
        if what.startswith("kill-"):
            _signal(pid, signal.SIGKILL)
        else:  # let go on a timer: the samples go on meanwhile
            _signal(pid, signal.SIGSTOP)
            resume = threading.Timer(STOP_S, _signal, (pid, signal.SIGCONT))
            resume.daemon = True
            resume.start()

    def watch(self, plan: list[tuple[float, str]], sample_every_s: float, seed: int) -> None:
        """Samples and strikes as planned until the run ends."""
        rng = random.Random(seed + 1)
        next_sample = 0.0
        while self.process.poll() is None:
            now = self.elapsed()
            if plan and now >= plan[0][0]:
                self.strike(plan.pop(0)[1], rng)
                continue
            if now >= next_sample:
                self.sample()
                next_sample = now + sample_every_s
            self._done.wait(0.5)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, signum)


def _process_figures(pid: int) -> dict | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0
    )
    return {"rss_bytes": rss * 1024, "open_files": fds}


def _disk_parts(run_dir: Path) -> dict[str, int]:
    parts = {"checkpoints": 0, "replay": 0, "metrics": 0, "logs": 0, "other": 0}
    logs: dict[str, int] = {}  # each log with its rotated parts
    for folder, _, names in os.walk(run_dir):
        top = Path(folder).relative_to(run_dir).parts
        for name in names:
            try:
                size = os.path.getsize(os.path.join(folder, name))
            except OSError:  # replaced while walked (a snapshot, a checkpoint)
                continue
            part = top[0] if top and top[0] in parts else "other"
            if not top and name.startswith("metrics.jsonl"):
                part = "metrics"
            if part == "logs":
                log = name.split(".log", 1)[0]
                logs[log] = logs.get(log, 0) + size
            parts[part] += size
    return {**parts, "largest_log": max(logs.values(), default=0)}


def lives(samples: list[dict]) -> list[dict]:
    """Each process's life: its role and ``(time_s, rss_bytes, open_files)`` samples."""
    found: dict[str, dict] = {}
    for sample in samples:
        for pid, figures in sample["processes"].items():
            life = found.setdefault(pid, {"role": figures["role"], "points": []})
            life["points"].append((sample["time_s"], figures["rss_bytes"], figures["open_files"]))
    return list(found.values())


def growth_figures(samples: list[dict]) -> dict[str, dict]:
    """Per role: lives long enough to judge, their largest RSS growth after warm-up (a
    fraction), and the largest spread of open files after warm-up."""
    by_role: dict[str, dict] = {}
    for life in lives(samples):
        points = life["points"]
        warm = [p for p in points if p[0] - points[0][0] >= WARMUP_S]
        if not warm or warm[-1][0] - warm[0][0] < LONG_LIFE_S:
            continue
        figures = by_role.setdefault(
            life["role"],
            {"lives": 0, "rss_growth": 0.0, "open_files_spread": 0, "open_files_growth": 0},
        )
        figures["lives"] += 1
        growth = warm[-1][1] / warm[0][1] - 1.0
        figures["rss_growth"] = max(figures["rss_growth"], growth)
        spread = max(p[2] for p in warm) - min(p[2] for p in warm)
        figures["open_files_spread"] = max(figures["open_files_spread"], spread)
        grown = max(p[2] for p in warm) - warm[0][2]
        figures["open_files_growth"] = max(figures["open_files_growth"], grown)
    return by_role


def disk_figures(samples: list[dict]) -> dict:
    """The run directory's bytes by part at the end, and each part's growth per hour over
    the second half of the run."""
    if not samples:
        return {}
    end = samples[-1]
    half = min(samples, key=lambda s: abs(s["time_s"] - end["time_s"] / 2))
    hours = max((end["time_s"] - half["time_s"]) / 3600, 1e-9)
    return {
        part: {"bytes": size, "per_hour": (size - half["disk"].get(part, 0)) / hours}
        for part, size in end["disk"].items()
    }


def account(delivery: dict, faults: list[dict], samples: list[dict]) -> dict:
    """What the run sent, stored and lost, against what its faults may lose by design."""
    kills = {
        kind: sum(f["fault"] == f"kill-{kind}" and f["pid"] is not None for f in faults)
        for kind in ("actor", "shard", "learner")
    }
    rates = [s["transitions_per_s"] for s in samples if s.get("transitions_per_s")]
    intake = max(rates) if rates else 0.0
    allowed = kills["actor"] * MAX_WINDOW * INSERT_BATCH + kills["shard"] * PERIOD_S * intake
    actors = delivery.get("actors") or {}
    lost = delivery.get("transitions_lost")
    return {
        "transitions_sent": sum(a["transitions_sent"] for a in actors.values()),
        "transitions_stored": delivery.get("transitions_received"),
        "transitions_lost": lost,
        "transitions_in_transit": delivery.get("transitions_in_transit"),
        "kills": kills,
        "loss_allowed_by_faults": round(allowed),
        "unaccounted": None if lost is None else max(0, lost - round(allowed)),
        "env_faults": delivery.get("env_faults"),
        "items_dropped": delivery.get("items_dropped"),
    }


def run(
    seconds: float,
    actors: int,
    kill_every_s: float,
    sample_every_s: float,
    seed: int,
    root: Path,
    progress,
) -> dict:
    plan = schedule(seconds, kill_every_s, seed)
    soak = Soak(root, seconds, actors, progress)
    try:
        soak.watch(list(plan), sample_every_s, seed)
        soak.process.wait(END_GRACE_S)
    finally:
        if soak.process.poll() is None:
            soak.process.send_signal(signal.SIGINT)
            soak.process.wait(END_GRACE_S)
    summary = json.loads((soak.run_dir / "summary.json").read_text())
    records = read_metrics(soak.run_dir)
    confirmations = [r for r in records if r.get("event") == "confirmation"]
    solved = [r for r in confirmations if r.get("solved")]
    delivery = (summary.get("outcome") or {}).get("delivery") or {}
    config = {
        "env": ENV,
        "seconds": seconds,
        "actors": actors,
        "shards": 2,
        "seed": seed,
        "kill_every_s": kill_every_s,
        "sample_every_s": sample_every_s,
        "period_s": PERIOD_S,
        "step_timeout_s": STEP_TIMEOUT_S,
        "rotation_mb": {"metrics": METRICS_MAX_MB, "log": LOG_MAX_MB, "kept_parts": KEPT_PARTS},
        "env_faults": {
            "raise_rate": RAISE_RATE,
            "nan_rate": NAN_RATE,
            "hang_after_steps": HANG_AFTER,
        },
        "step_cost": "none: CartPole's own CPU",
        "exit_code": summary.get("exit_code"),
        "reason": summary.get("reason"),
        "restarts": {
            role: summary.get(f"{role}_restarts") for role in ("actor", "shard", "learner")
        },
        "actor_hangs": summary.get("actor_hangs"),
        "evaluator_hangs": (summary.get("outcome") or {}).get("evaluator_hangs"),
        "target_reached": bool(solved),
        "first_solve_time_s": solved[0]["weights_time_s"] if solved else None,
        "confirmations": len(confirmations),
        "faults": soak.faults,
        "growth": growth_figures(soak.samples),
        "disk": disk_figures(soak.samples),
        "account": account(delivery, soak.faults, soak.samples),
        "delivery": delivery,  # the run's own account, per actor
        "samples": soak.samples,
    }
    return {"config": config, "records": _records(config), "ratios": []}


def _records(config: dict) -> list[dict]:
    params = {"seconds": config["seconds"], "actors": config["actors"]}
    records = [
        ok_record(
            SUITE,
            "rss growth after warm-up",
            role,
            "largest of its lives",
            "fraction",
            [figures["rss_growth"]],
            {**params, **figures},
        )
        for role, figures in config["growth"].items()
        if figures["rss_growth"] >= 0
    ]
    rates = [s["transitions_per_s"] for s in config["samples"] if s.get("transitions_per_s")]
    if rates:
        records.append(
            ok_record(
                SUITE,
                "intake under faults",
                "apex",
                "transitions per second",
                "transitions/s",
                [statistics.median(rates)],
                params,
            )
        )
    return records
