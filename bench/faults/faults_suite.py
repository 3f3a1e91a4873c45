"""Fault suite: what each fault costs a real ``apex train`` on this machine, and whether the
run comes back by itself.

Each case starts a CartPole run (2 actors, 1 shard; snapshots and checkpoints every
``PERIOD_S``, progress every 0.5 s, no evaluation, no target), waits until it trains and
holds two snapshots and two checkpoints, injects one fault, watches the learner get back
to half its update rate, lets it train a little more, stops it with SIGINT (the order
that loses nothing) and reads the run's own account.

Faults: kill -9 of an actor, of the shard, of the learner; SIGSTOP of the shard for a
while; the newest snapshot corrupted, then the shard killed; the newest checkpoint
truncated, then the learner killed; the run directory's disk full for a while (a small
tmpfs, which needs root); a shard lost for good (``lose-shard``: a run of 2 shards with no
restart budget, one killed; actors reroute what they kept for it after
``LOSE_REROUTE_S``). A link cut and a Slurm preemption need the network-namespace
hosts and the real Slurm: ``--slurm`` (``bench.faults.slurm_faults``) runs them, and the others,
as Slurm jobs.

Faults that lose what came after the newest checkpoint or snapshot strike when it is
three quarters of a period old, near the worst case. Per case: ``recovered`` (1 or 0),
``recovery_s`` (fault to the learner at half its rate before), ``updates_lost``
(learner: updates at the fault minus the update it resumed at), ``replay_lost`` (shard:
transitions held at the fault minus those restored), ``transitions_lost`` and
``transitions_in_transit`` (the run's end account), counters of what was refused,
resent and failed, and one period's updates and ingest to read the losses against.
Updates and sizes at the fault are the last progress record's (written every 0.5 s), so
they lag the fault by at most that.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from apex.learning.checkpoint import every_checkpoint
from apex.learning.delivery import lost_by_actor
from apex.learning.metrics import read_metrics
from bench.faults.fault_names import FAULTS
from bench.report import ok_record
from bench.workers import REPO_ROOT, worker_env
from launch.supervision.processes import run_processes
from replay.store.snapshot import complete_snapshots

SUITE = "faults"
PERIOD_S = 4.0
START_TIMEOUT_S = 180.0
RECOVERY_TIMEOUT_S = 120.0
TMPFS_BYTES = 96 * 2**20
LATE = 0.75
LOSE_REROUTE_S = 5.0


class FaultRun:
    """One ``apex train`` in ``root/run``, its output in ``root/train.out``."""

    def __init__(
        self, root: Path, tmpfs: bool = False, shards: int = 1, settings: tuple[str, ...] = ()
    ) -> None:
        self.run_dir = root / "run"
        self.run_dir.mkdir(parents=True)
        self.mounted = False
        if tmpfs:
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(self.run_dir)],
                check=True,
            )
            self.mounted = True
        self.output = root / "train.out"
        command = [
            sys.executable,
            "-m",
            "launch",
            "train",
            "--actors",
            "2",
            "--shards",
            str(shards),
            "--max-time",
            "900",
            "--target-return",
            "1e12",
            "--run-dir",
            str(self.run_dir),
            "--no-curves",
            "--set",
            "learner.eval_every_steps=0",
            "--set",
            "learner.metrics_interval_s=0.5",
            "--set",
            f"learner.checkpoint_interval_s={PERIOD_S}",
            "--set",
            f"replay.snapshot_interval_s={PERIOD_S}",
            *(part for setting in settings for part in ("--set", setting)),
        ]
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=worker_env(), stdout=out, stderr=subprocess.STDOUT
            )
        self._pause = threading.Event()

    def ended(self) -> str | None:
        """How the run ended (None: it runs)."""
        code = self.process.poll()
        return None if code is None else f"exit {code}"

    def special(self, fault: str, hold_s: float) -> dict | None:
        """Does a fault only this kind of run has; None if ``fault`` is not one."""
        return None

    def progress(self) -> list[dict]:
        return [r for r in read_metrics(self.run_dir) if r.get("event") == "progress"]

    def wait(self, condition: Callable[[], object], timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            ended = self.ended()
            if ended is not None:
                raise RuntimeError(f"the run ended ({ended}) before {what}: {self.tail()}")
            self._pause.wait(0.1)
        raise TimeoutError(f"no {what} within {timeout_s:.0f} s: {self.tail()}")

    def tail(self, lines: int = 8) -> str:
        return " | ".join(self.output.read_text(errors="replace").splitlines()[-lines:])

    def pids(self, role: str) -> list[int]:
        return sorted(pid for pid, r in run_processes(self.run_dir).items() if r == role)

    def log(self, name: str) -> str:
        path = self.run_dir / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def snapshots(self) -> list[tuple[int, Path]]:
        return complete_snapshots(self.run_dir / "replay" / "shard-0")

    def checkpoints(self) -> list[Path]:
        return every_checkpoint(self.run_dir / "checkpoints")

    def stop(self) -> tuple[dict, dict]:
        """SIGINT, then the run's summary and its end record."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
            self.process.wait(240)
            summary = json.loads((self.run_dir / "summary.json").read_text())
            ends = [r for r in read_metrics(self.run_dir) if r.get("event") == "end"]
            return summary, (ends[-1] if ends else {})
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            if self.mounted:
                subprocess.run(["umount", "-l", str(self.run_dir)], check=False)


def _wait_late_in_period(run: FaultRun, fault: str) -> None:
    """For the faults that lose what came after the newest checkpoint or snapshot: waits
    until it is ``LATE`` of a period old, so the loss measured is near its worst, not the
    luck of where in the period the fault fell."""
    if fault in ("kill-learner", "corrupt-checkpoint"):
        newest = lambda: run.checkpoints()[-1]  # noqa: E731
    elif fault in ("kill-shard", "corrupt-snapshot"):
        newest = lambda: run.snapshots()[0][1]  # noqa: E731
    else:
        return

    def late() -> bool:
        try:
            return time.time() - newest().stat().st_mtime >= LATE * PERIOD_S
        except (OSError, IndexError):  # replaced while looked at
            return False

    run.wait(late, 3 * PERIOD_S, "a late point in the checkpoint or snapshot period")


def _kill_first(run: FaultRun, role: str) -> None:
    victims = run.pids(role)
    os.kill(victims[0], signal.SIGKILL)
    run.wait(lambda: set(run.pids(role)) - set(victims), 60, f"a restarted {role}")


def _corrupt_newest_snapshot(run: FaultRun) -> None:
    newest = run.snapshots()[0][1]
    victim = max(
        (p for p in newest.iterdir() if p.suffix == ".bin"), key=lambda p: p.stat().st_size
    )
    with open(victim, "r+b") as handle:  # flip a byte in the middle: the checksum must see it
        handle.seek(victim.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))


def _truncate_newest_checkpoint(run: FaultRun) -> None:
    newest = run.checkpoints()[-1]
    os.truncate(newest, newest.stat().st_size // 2)


def _fill_disk(run: FaultRun) -> Path:
    filler = run.run_dir / "filler"
    chunk = b"\0" * 2**20
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(chunk)
                handle.flush()
        except OSError:
            return filler
    return filler


def _last_int(pattern: str, text: str) -> int | None:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else None


def _local_run(root: Path, fault: str) -> FaultRun:
    lose = fault == "lose-shard"
    settings = ("replay.restart_budget=0", f"actor.reroute_after_s={LOSE_REROUTE_S}")
    return FaultRun(
        root, tmpfs=fault == "full-disk", shards=2 if lose else 1, settings=settings if lose else ()
    )


def _measure(fault: str, hold_s: float, settle_records: int, open_run=_local_run) -> dict:
    with tempfile.TemporaryDirectory(prefix="apex-faults-") as directory:
        lose = fault == "lose-shard"
        run = open_run(Path(directory), fault)
        try:
            run.wait(
                lambda: (
                    len(run.snapshots()) >= 2
                    and len(run.checkpoints()) >= 2
                    and len(run.progress()) >= 4
                ),
                START_TIMEOUT_S,
                "training with two snapshots and two checkpoints",
            )
            _wait_late_in_period(run, fault)
            before = run.progress()
            rate = statistics.median(r["updates_per_s"] for r in before[-4:])
            ingest = statistics.median(r.get("transitions_per_s") or 0 for r in before[-4:])
            at_fault = {
                "updates": before[-1]["updates"],
                "replay": sum(s or 0 for s in before[-1]["replay_sizes"]),
            }
            started = time.monotonic()
            measured = _inject(run, fault, hold_s)
            if "requeue_s" in measured:  # the first job's last records are not a recovery
                before = run.progress()
            if lose:  # that shard's whole replay is gone with it
                at_fault["replay"] = before[-1]["replay_sizes"][measured.pop("shard")] or 0
            after = len(before)

            def back() -> float | None:
                records = run.progress()[after:]
                fast = any(r["updates_per_s"] >= 0.5 * rate for r in records)
                return time.monotonic() if fast else None

            recovered_at = run.wait(back, RECOVERY_TIMEOUT_S, "recovery")
            done = len(run.progress())
            run.wait(lambda: len(run.progress()) >= done + settle_records, 60, "more progress")
        except (TimeoutError, RuntimeError) as exc:
            summary, end = run.stop()
            return {"recovered": 0, "error": str(exc)[:500], "exit_code": summary.get("exit_code")}
        summary, end = run.stop()
        learner_log, shard_log = run.log("learner"), run.log("shard-0")
    resumed_at = _last_int(r"resumed from \S+ at update (\d+)", learner_log)
    restored = _last_int(r"restored \S+: (\d+) transitions", shard_log)
    restored = 0 if lose else restored
    delivery = end.get("delivery") or {}
    result = {
        "recovered": 1,
        "recovery_s": recovered_at - started,
        "rate_before": rate,
        "updates_lost": None if resumed_at is None else max(0, at_fault["updates"] - resumed_at),
        "replay_lost": None if restored is None else max(0, at_fault["replay"] - restored),
        # What one period of training or ingest is, to read the losses against.
        "updates_per_period": rate * PERIOD_S,
        "transitions_per_period": ingest * PERIOD_S,
        "transitions_lost": delivery.get("transitions_lost"),
        "lost_by_actor": lost_by_actor(delivery),
        "transitions_in_transit": delivery.get("transitions_in_transit"),
        "resent_batches": delivery.get("resent_batches"),
        "rerouted_batches": delivery.get("rerouted_batches"),
        "transitions_abandoned": delivery.get("transitions_abandoned"),
        "duplicates_dropped": delivery.get("duplicates_dropped"),
        "batches_lost_at_shard_restart": delivery.get("batches_lost_at_shard_restart"),
        "snapshots_refused": shard_log.count("snapshot refused"),
        "snapshots_failed": delivery.get("snapshots_failed"),
        "checkpoints_refused": learner_log.count("checkpoint refused"),
        "checkpoints_failed": end.get("checkpoints_failed"),
        "metrics_dropped": end.get("metrics_dropped"),
        "exit_code": summary.get("exit_code"),
        "restarts": {
            role: summary.get(f"{role}_restarts") for role in ("actor", "shard", "learner")
        },
        "shards_given_up": summary.get("shards_given_up"),
        "job_state": summary.get("job_state"),
        "job_restarts": summary.get("job_restarts"),
        **measured,
    }
    return result


def _inject(run: FaultRun, fault: str, hold_s: float) -> dict:
    """Does ``fault`` to ``run``; returns what the fault itself measured."""
    pause = threading.Event()
    special = run.special(fault, hold_s)
    if special is not None:
        return special
    if fault == "kill-actor":
        _kill_first(run, "actor")
    elif fault in ("kill-shard", "corrupt-snapshot"):
        if fault == "corrupt-snapshot":
            _corrupt_newest_snapshot(run)
        _kill_first(run, "shard")
    elif fault in ("kill-learner", "corrupt-checkpoint"):
        if fault == "corrupt-checkpoint":
            _truncate_newest_checkpoint(run)
        _kill_first(run, "learner")
    elif fault == "lose-shard":
        victim = run.pids("shard")[0]
        arguments = Path(f"/proc/{victim}/cmdline").read_bytes().split(b"\0")
        index = int(arguments[arguments.index(b"--shard-index") + 1])
        os.kill(victim, signal.SIGKILL)
        run.wait(
            lambda: "given up" in run.output.read_text(errors="replace"), 60, "the shard given up"
        )
        return {"shard": index}
    elif fault == "stop-shard":
        shard = run.pids("shard")[0]
        os.kill(shard, signal.SIGSTOP)
        pause.wait(hold_s)
        os.kill(shard, signal.SIGCONT)
        return {"stopped_s": hold_s}
    elif fault == "full-disk":
        updates = run.progress()[-1]["updates"]
        filler = _fill_disk(run)
        pause.wait(hold_s)
        filler.unlink()
        freed = time.monotonic()
        snapshot, checkpoint = run.snapshots()[0][0], run.checkpoints()[-1]
        written = "a snapshot and a checkpoint after the disk was freed"
        run.wait(
            lambda: run.snapshots()[0][0] > snapshot and run.checkpoints()[-1] != checkpoint,
            RECOVERY_TIMEOUT_S,
            written,
        )
        first = run.wait(
            lambda: run.progress()[-1]["updates"] > updates and run.progress()[-1],
            RECOVERY_TIMEOUT_S,
            "progress after the disk was freed",
        )
        return {
            "full_s": hold_s,
            "writes_back_s": time.monotonic() - freed,
            "updates_while_full": first["updates"] - updates,
        }
    else:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    return {}


METRICS = (
    ("recovered", "bool"),
    ("recovery_s", "s"),
    ("updates_lost", "updates"),
    ("replay_lost", "transitions"),
    ("transitions_lost", "transitions"),
    ("transitions_in_transit", "transitions"),
    ("resent_batches", "batches"),
    ("rerouted_batches", "batches"),
    ("transitions_abandoned", "transitions"),
    ("duplicates_dropped", "batches"),
    ("batches_lost_at_shard_restart", "batches"),
    ("snapshots_refused", "count"),
    ("snapshots_failed", "count"),
    ("checkpoints_refused", "count"),
    ("checkpoints_failed", "count"),
    ("metrics_dropped", "records"),
    ("updates_while_full", "updates"),
    ("writes_back_s", "s"),
    ("requeue_s", "s"),
    ("replay_restored_fraction", "fraction"),
    ("updates_per_period", "updates"),
    ("transitions_per_period", "transitions"),
)


def run(
    quick: bool = False,
    faults: tuple[str, ...] | None = None,
    progress=print,
    slurm: bool = False,
    open_run: Callable | None = None,
    cluster: contextlib.AbstractContextManager | None = None,
) -> dict:
    """The suite on this machine; ``bench.faults.slurm_faults.run`` runs it under the namespace
    Slurm by giving its own ``open_run`` (a run for a fault) and ``cluster`` (around them
    all; None where it cannot start)."""
    if slurm and open_run is None:
        raise ValueError("a Slurm fault run needs its open_run: see bench.faults.slurm_faults.run")
    open_run = open_run or _local_run
    cluster = contextlib.nullcontext() if not slurm else cluster
    faults = faults or FAULTS
    hold_s = 5.0 if quick else 30.0
    settle = 2 if quick else 6
    records = []
    with cluster or contextlib.nullcontext():
        for fault in faults:
            params = {"fault": fault, "hold_s": hold_s, "period_s": PERIOD_S, "slurm": slurm}
            unavailable = _unavailable(fault, slurm, cluster is None)
            if unavailable:
                records.append(
                    {
                        "suite": SUITE,
                        "case": fault,
                        "implementation": "apex",
                        "status": "unavailable",
                        "reason": unavailable,
                        "params": params,
                    }
                )
                continue
            progress(f"faults: {fault}")
            result = _measure(fault, hold_s, settle, open_run)
            params = {
                **params,
                **{
                    key: result.get(key)
                    for key in (
                        "exit_code",
                        "restarts",
                        "error",
                        "shards_given_up",
                        "job_state",
                        "job_restarts",
                        "lost_by_actor",
                    )
                },
                "shards": 2 if fault == "lose-shard" else 1,
            }
            for metric, unit in METRICS:
                value = result.get(metric)
                if value is not None:
                    records.append(ok_record(SUITE, fault, "apex", metric, unit, [value], params))
    hosts = "learner, shard and actors on 3 namespace hosts under Slurm" if slurm else "local"
    return {
        "config": {
            "faults": list(faults),
            "hold_s": hold_s,
            "period_s": PERIOD_S,
            "actors": 2,
            "shards": "1 (lose-shard: 2)",
            "env": "CartPole-v1",
            "hosts": hosts,
        },
        "records": records,
        "ratios": [],
    }


def _unavailable(fault: str, slurm: bool, no_cluster: bool) -> str | None:
    """Why ``fault`` cannot run here (None: it can)."""
    if slurm and no_cluster:
        return "the namespace Slurm needs root"
    if slurm and fault in ("full-disk", "lose-shard"):
        return "a local fault (apex train)"
    if not slurm and fault in ("cut-link", "preempt"):
        return "needs the namespace hosts under Slurm (--slurm)"
    if fault == "full-disk" and os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    return None
