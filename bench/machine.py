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
    """HEAD's hash and whether the work tree had uncommitted changes."""
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
    except (OSError, subprocess.CalledProcessError):
        # A copy of the tree without .git (a lent GPU machine gets one): the commit it was
        # copied from, as whoever copied it said, and no claim about its cleanliness.
        stated = os.environ.get("APEX_GIT_COMMIT")
        return {"commit": stated, "dirty": None, **({"stated": True} if stated else {})}
    return {"commit": head, "dirty": bool(status.strip())}


def machine_info() -> dict[str, object]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "gpu": _gpu(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
