"""The fault suite under a real Slurm (``apex bench faults --slurm``): the faults of
``bench.faults.faults_suite`` on three network-namespace hosts, plus the two that only a cluster
has: the shard host's link cut, and a preemption (the time-limit signal, then a requeue).

Each case submits a CartPole job with ``apex slurm submit``: the learner, one shard and two
actors, each role pinned to its own host (``learner``, ``shard``, ``actor``). Needs root;
the cluster is the one the tests use (``slurm/cluster``: Debian's slurmctld and slurmd,
one slurmd per namespace host). The suite starts it when it is not up and stops it again.
A job ends by a SIGTERM to its learner, which writes its account and then ends the job.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from apex.learning.metrics import read_metrics
from bench.faults import faults_suite
from bench.faults.faults_suite import PERIOD_S, FaultRun
from bench.workers import REPO_ROOT, worker_env
from launch.slurm_commands import job_state
from launch.supervision.processes import run_processes

CLUSTER = REPO_ROOT / "slurm" / "cluster"
SLURM_FAULTS = ("kill-actor", "kill-shard", "kill-learner", "stop-shard", "cut-link", "preempt")
HOSTS = ("learner", "shard", "actor")
ENDED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED")
# The process that does a role's work: a shard and a learner run as their task's child
# (``launch.slurm.keeper``); srun's own process names the task's command line too.
WORKER = {"shard": "-m launch replay ", "learner": "--kept", "actor": "--kept"}


def cluster_up() -> bool:
    """True if this machine's namespace Slurm answers with its three hosts."""
    try:
        found = subprocess.run(
            ["sinfo", "--noheader", "--format=%n %t"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    states = dict(line.split() for line in found.stdout.splitlines() if len(line.split()) == 2)
    return all(states.get(host, "").startswith(("idle", "mix", "alloc")) for host in HOSTS)


@contextlib.contextmanager
def namespace_cluster() -> Iterator[None]:
    """The three-host Slurm, started (and stopped after) unless it is up already."""
    if cluster_up():
        yield
        return
    script = [
        ["bash", str(CLUSTER / "slurm.sh"), "down"],
        ["bash", str(CLUSTER / "netns.sh"), "up"],
        ["bash", str(CLUSTER / "slurm.sh"), "up", "ns3"],
    ]
    try:
        for command in script:
            subprocess.run(command, check=True, timeout=600)
        yield
    finally:
        subprocess.run(["bash", str(CLUSTER / "slurm.sh"), "down"], check=False, timeout=60)
        subprocess.run(["bash", str(CLUSTER / "netns.sh"), "down"], check=False, timeout=60)


class SlurmFaultRun(FaultRun):
    """One job in ``root/run``; its output is the job's ``slurm-JOBID.out``."""

    def __init__(self, root: Path, settings: tuple[str, ...] = ()) -> None:
        self.run_dir = root / "run"
        self.mounted = False
        command = [
            sys.executable,
            "-m",
            "launch",
            "slurm",
            "submit",
            "--run-dir",
            str(self.run_dir),
            "--actors-per-node",
            "2",
            "--shards",
            "1",
            "--max-time",
            "900",
            "--target-return",
            "1e12",
            "--set",
            'slurm.learner_options=["--nodelist=learner"]',
            "--set",
            'slurm.shard_options=["--nodelist=shard"]',
            "--set",
            'slurm.actor_options=["--nodelist=actor"]',
            "--set",
            "learner.eval_every_steps=0",
            "--set",
            "learner.metrics_interval_s=0.5",
            "--set",
            f"learner.checkpoint_interval_s={PERIOD_S}",
            "--set",
            f"replay.snapshot_interval_s={PERIOD_S}",
            "--set",
            f"slurm.python={sys.executable}",  # the test cluster's nodes are here
            *(part for setting in settings for part in ("--set", setting)),
        ]
        subprocess.run(
            command, cwd=REPO_ROOT, env=worker_env(), check=True, timeout=60, capture_output=True
        )
        self.job_id = (self.run_dir / "slurm-job-id").read_text().strip()
        self._state, self._asked_at = "", float("-inf")
        self._pause = threading.Event()

    def ended(self) -> str | None:
        now = time.monotonic()
        if now - self._asked_at >= 2.0:  # scontrol is a round trip to the controller
            self._state = job_state(self.job_id).get("JobState", "")
            self._asked_at = now
        return self._state if self._state in ENDED_STATES else None

    def tail(self, lines: int = 8) -> str:
        return " | ".join(self.job_output().splitlines()[-lines:])

    def job_output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.run_dir.glob("slurm-*.out"))

    def log(self, name: str) -> str:
        return self.job_output()  # every task's log, lines prefixed by rank

    def pids(self, role: str) -> list[int]:
        found = []
        for pid, found_role in run_processes(self.run_dir).items():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if (
                found_role == role
                and WORKER[role] in command.decode()
                and (b"SLURM_PROCID=" in environ)
            ):
                found.append(pid)
        return sorted(found)

    def special(self, fault: str, hold_s: float) -> dict | None:
        if fault == "cut-link":
            subprocess.run(["ip", "link", "set", "veth-shard", "down"], check=True, timeout=10)
            try:
                self._pause.wait(hold_s)
            finally:
                subprocess.run(["ip", "link", "set", "veth-shard", "up"], check=True, timeout=10)
            return {"cut_s": hold_s}
        if fault == "preempt":
            signalled = time.monotonic()
            starts = self._starts()
            subprocess.run(
                ["scancel", "--batch", "--signal=USR1", self.job_id], check=True, timeout=30
            )
            self.wait(lambda: self._starts() > starts, 300, "the requeued job's learner")
            output = self.job_output()
            final = re.findall(r"written \(final, [^)]*, (\d+) transitions\)", output)
            restored = re.findall(r"restored \S+: (\d+) transitions", output)
            fraction = int(restored[-1]) / int(final[-1]) if final and restored else None
            return {"requeue_s": time.monotonic() - signalled, "replay_restored_fraction": fraction}
        return None

    def _starts(self) -> int:
        return sum(r.get("event") == "start" for r in read_metrics(self.run_dir))

    def stop(self) -> tuple[dict, dict]:
        """Stops the learner (SIGTERM), which ends the job as a finished run does: its
        account first, while the shards still answer, then ``scancel`` of the rest.
        Returns the job's state and the end record."""
        learner = self.pids("learner")
        if learner:
            os.kill(learner[0], signal.SIGTERM)
        else:
            subprocess.run(["scancel", "--signal=TERM", self.job_id], check=False, timeout=30)
        deadline = time.monotonic() + 240
        while self.ended() is None and time.monotonic() < deadline:
            self._pause.wait(0.5)
        self._asked_at = float("-inf")
        fields = job_state(self.job_id)
        if self.ended() is None:
            subprocess.run(["scancel", self.job_id], check=False, timeout=30)
        code = fields.get("ExitCode", "?:?").split(":")[0]
        summary = {
            "exit_code": int(code) if code.isdigit() else None,
            "job_state": fields.get("JobState"),
            "job_restarts": fields.get("Restarts"),
        }
        ends = [r for r in read_metrics(self.run_dir) if r.get("event") == "end"]
        return summary, (ends[-1] if ends else {})


def run(quick: bool = False, faults: tuple[str, ...] | None = None, progress=print) -> dict:
    """The fault suite (``bench.faults.faults_suite``) with every role a Slurm task on the three
    namespace hosts; without root (no namespaces) each fault is an unavailable record."""
    cluster = namespace_cluster() if os.geteuid() == 0 else None
    return faults_suite.run(
        quick,
        faults or SLURM_FAULTS,
        progress,
        slurm=True,
        open_run=lambda root, fault: SlurmFaultRun(root),
        cluster=cluster,
    )
