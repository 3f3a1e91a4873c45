"""Which processes on this host belong to a run (every role's command line names its run
directory), and what they use: ``apex top`` shows CPU and memory per role from here, the
system benchmark measures with it, and the tests check that a run left nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

ROLE_OF_COMMAND = {
    "train": "train",
    "replay": "shard",
    "learner": "learner",
    "actor": "actor",
    "evaluator": "evaluator",  # the learner's child, its config in RUN_DIR/evaluator/
    # tasks of a Slurm job (apex slurm task ROLE)
    "slurm task shard": "shard",
    "slurm task learner": "learner",
    "slurm task actor": "actor",
}


def _names_run_dir(entry: Path, words: list[str], run_dir: Path, resolved: Path) -> bool:
    """Whether a command line names ``run_dir``, or a path inside it, as given or from
    the process's own working directory (``apex top /abs/run`` for a run started as
    ``--run-dir runs/x``)."""
    if any(str(run_dir) in word for word in words):
        return True
    try:
        cwd = Path(os.readlink(entry / "cwd"))
    except OSError:
        return False
    for word in words:
        if "/" not in word:
            continue
        path = (cwd / word.partition("=")[2 if "=" in word else 0]).resolve()
        if path == resolved or resolved in path.parents:
            return True
    return False


def run_processes(run_dir: Path) -> dict[int, str]:
    """PID → role (train, shard, learner, actor, evaluator) of every live process of
    ``run_dir``."""
    processes = {}
    resolved = run_dir.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        command = " ".join(words)
        if "-m launch " not in command or not _names_run_dir(entry, words, run_dir, resolved):
            continue
        for word, role in ROLE_OF_COMMAND.items():
            if f"-m launch {word} " in command:
                processes[int(entry.name)] = role
    return processes


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of ``pid`` so far (None: it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resident_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` now, in bytes (None: it is gone)."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def machine_cpu_seconds() -> tuple[float, float]:
    """This machine's busy and total CPU seconds so far, all cores together (idle and
    waiting on I/O are not busy): two readings give its busy cores between them."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def softirq_seconds() -> float:
    """CPU seconds this machine has spent in soft interrupts (network receive, bridging)
    so far, all cores together: work no process is charged for."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[7]) / os.sysconf("SC_CLK_TCK")
