"""Every file and folder of a run directory, by name, with who writes and who reads it; and
the summary and config readers every view shares.

- ``config.json``: written by ``apex train`` (the supervisor), ``apex slurm submit``, a
  hand-started learner role without one; read by every role, the views, ``apex evaluate``
  and ``--resume``.
- ``spec.json``: the supervisor and ``apex slurm submit`` (``launch.builder``); the shards.
- ``metrics.jsonl`` and its rotated parts: the learner (``apex.learning.metrics``); the
  views and the benchmarks.
- ``summary.json``: the supervisor at a local run's end; ``apex status``, the live view,
  the API.
- ``curves.png``: the supervisor at the end, ``apex plot``; the user.
- ``checkpoints/``: the learner, and the evaluator's kept weights; ``--resume``,
  ``apex evaluate``.
- ``replay/shard-N/``: each shard's snapshots; a restarted or requeued shard.
- ``logs/``: each role's stderr (the supervisor), the evaluator's (its keeper); ``apex
  status`` and the end reason.
- ``evaluator/config.json``: the learner's evaluator keeper; the evaluator.
- ``keys/``: ``apex train`` and ``apex slurm submit`` (``launch.run_keys``); every role.
- ``job.sh``, ``slurm-job-id``, ``multi-prog.conf``, ``slurm-JOBID.out``: ``apex slurm
  submit``, the batch script and Slurm; ``apex slurm status``, ``sbatch``.
"""

from __future__ import annotations

import json
from pathlib import Path

from apex.learning.metrics import METRICS_FILE

CONFIG_FILE = "config.json"
SPEC_FILE = "spec.json"
SUMMARY_FILE = "summary.json"
CURVES_FILE = "curves.png"
CHECKPOINTS_DIR = "checkpoints"
REPLAY_DIR = "replay"
LOGS_DIR = "logs"
EVALUATOR_DIR = "evaluator"
KEYS_DIR = "keys"
JOB_FILE = "job.sh"
JOB_ID_FILE = "slurm-job-id"
MULTI_PROG_FILE = "multi-prog.conf"

__all__ = ["METRICS_FILE"]


def read_config(run_dir: Path) -> dict:
    """A run's resolved ``config.json`` as plain values ({} if it cannot be read)."""
    try:
        return json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def read_summary(run_dir: Path) -> dict | None:
    """The supervisor's summary of a local run, or None (none yet, a Slurm run, or a file
    that does not parse)."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return summary if isinstance(summary, dict) else None


def write_summary(run_dir: Path, summary: dict) -> None:
    """Writes ``summary`` as the run's outcome, the earlier outcomes (a resumed run's
    previous lives) kept in its ``history``, oldest first; atomically."""
    earlier = read_summary(run_dir)
    history = []
    if earlier is not None:
        history = [*earlier.pop("history", []), earlier]
    path = run_dir / SUMMARY_FILE
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps({**summary, "history": history}, indent=2, default=str) + "\n")
    temporary.replace(path)
