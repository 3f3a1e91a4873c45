"""A point of the scaling sweep across hosts: each run an ``apex slurm submit`` job on the
namespace Slurm cluster (``slurm/cluster``: Debian's slurmctld and a slurmd per network
namespace host), its learner (and evaluator) on host ``learner``, its shard on ``shard``
and every actor on ``actor``, each connection through veth pairs and a bridge as across
a cluster's network. The hosts share this machine's cores, so the point measures the
cluster path (Slurm's launch, the roles' sockets across hosts), not more cores. Root only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.faults.slurm_faults import ENDED_STATES
from bench.scaling.scaling_runs import busy_cores, read_run, run_base
from bench.scaling.scaling_tasks import ScalingTask
from bench.workers import REPO_ROOT, worker_env
from launch.slurm_commands import job_state
from launch.supervision.processes import machine_cpu_seconds

# A job's start (sbatch, srun on three hosts) and its end are outside the learner's clock.
JOB_GRACE_S = 180.0


def submit_command(task: ScalingTask, actors: int, seed: int, run_dir: Path) -> list[str]:
    """``apex slurm submit`` of one run: the task's settings, every role on its host."""
    placement = {
        "slurm.learner_options": ["--nodelist=learner"],
        "slurm.shard_options": ["--nodelist=shard"],
        "slurm.actor_options": ["--nodelist=actor"],
        "slurm.python": sys.executable,  # the test cluster's nodes are this machine
    }
    settings = task.train_settings(actors) + [
        f"{key}={json.dumps(value)}" for key, value in placement.items()
    ]
    return [
        sys.executable,
        "-m",
        "launch",
        "slurm",
        "submit",
        *task.run_arguments(seed, str(run_dir)),
        "--nodes",
        "1",
        "--actors-per-node",
        str(actors),
        "--shards",
        "1",
        *(part for setting in settings for part in ("--set", setting)),
    ]


def job_outcome(run_dir: Path) -> dict | None:
    """The learner's outcome, the last line of the job's output that is one (the learner
    prints it as ``{"outcome": {...}}`` when it ends)."""
    found = None
    for path in sorted(run_dir.glob("slurm-*.out")):
        for line in path.read_text(errors="replace").splitlines():
            start = line.find('{"outcome"')
            if start < 0:
                continue
            try:
                found = json.loads(line[start:])["outcome"]
            except (ValueError, KeyError, TypeError):
                continue
    return found


def _wait_for_end(job_id: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = job_state(job_id).get("JobState", "")
        if state in ENDED_STATES:
            return state
        time.sleep(2.0)  # scontrol is a round trip to the controller
    subprocess.run(["scancel", job_id], check=False, timeout=30)
    return "timed out"


def run_point_on_hosts(task: ScalingTask, actors: int, seed: int, cores: int) -> dict:
    """One run as a Slurm job across the namespace hosts (``scaling_runs.run_point``'s
    record, with ``hosts`` and the job's id and end state)."""
    base = {**run_base(task, actors, seed), "hosts": ["learner", "shard", "actor"]}
    with tempfile.TemporaryDirectory(prefix="apex-scaling-hosts-", dir="/tmp") as directory:
        run_dir = Path(directory) / "run"
        before, started = machine_cpu_seconds(), time.time()
        submitted = subprocess.run(
            submit_command(task, actors, seed, run_dir),
            cwd=REPO_ROOT,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if submitted.returncode != 0:
            tail = (submitted.stderr or submitted.stdout).strip().splitlines()[-1:] or ["?"]
            return {**base, "error": f"apex slurm submit exited {submitted.returncode}: {tail[0]}"}
        job_id = (run_dir / "slurm-job-id").read_text().strip()
        state = _wait_for_end(job_id, task.budget_s + JOB_GRACE_S)
        base.update(
            job_id=job_id,
            job_state=state,
            wall_s=time.time() - started,
            machine_busy_cores=busy_cores(before, machine_cpu_seconds(), cores),
        )
        outcome = job_outcome(run_dir)
        if outcome is None:
            return {**base, "error": f"job {job_id} ended {state} without the learner's outcome"}
        return {**base, **read_run(run_dir, task, outcome)}
