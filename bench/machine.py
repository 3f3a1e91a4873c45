"""What a benchmark result was measured on: machine, package versions, git commit."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("numpy", "numba", "pyzmq", "torch", "gymnasium", "cpprb", "torchrl", "tensordict")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):  # no /proc: another system
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _gpu() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(directory: Path) -> dict[str, object]:
    """HEAD's hash and whether the work tree had uncommitted changes.

    ``APEX_GIT_COMMIT``, where set, names the commit instead: a copy of the tree sent to
    another machine (a lent GPU) may come without .git, or with another commit's, so the
    copier says which commit it sent; the record marks it as stated, and keeps what git
    there said beside it.
    """
    stated = os.environ.get("APEX_GIT_COMMIT")
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=directory,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        found = {"commit": head, "dirty": bool(status.strip())}
    except (OSError, subprocess.CalledProcessError):
        found = {"commit": None, "dirty": None}
    if stated:
        return {"commit": stated, "dirty": None, "stated": True, "git_says": found}
    return found


def machine_info() -> dict[str, object]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "gpu": _gpu(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
