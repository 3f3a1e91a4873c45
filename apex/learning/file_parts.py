"""Files a run appends to for as long as it runs (``metrics.jsonl``, each role's log), kept
to a bounded size the way logrotate keeps a daemon's: past its size a file becomes part 1
(``metrics.jsonl.1``), part 1 becomes part 2, and the part beyond :data:`KEPT_PARTS` is
deleted. A file therefore takes at most ``(KEPT_PARTS + 1) x`` its size on disk, and its
readers read the parts oldest first (:func:`parts_oldest_first`)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

KEPT_PARTS = 3


def part(path: Path, number: int) -> Path:
    """The ``number``-th older part of ``path`` (1: the newest of them)."""
    return path.with_name(f"{path.name}.{number}")


def parts_oldest_first(path: Path) -> list[Path]:
    """``path``'s older parts that exist, oldest first, then ``path`` if it exists."""
    older = [part(path, n) for n in range(KEPT_PARTS, 0, -1)]
    return [p for p in (*older, path) if p.exists()]


def _make_room(path: Path) -> None:
    """Deletes the oldest kept part and moves the others one older, freeing part 1."""
    with contextlib.suppress(FileNotFoundError):
        part(path, KEPT_PARTS).unlink()
    for number in range(KEPT_PARTS - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            part(path, number).replace(part(path, number + 1))


def rotate_renaming(path: Path) -> None:
    """``path`` becomes part 1; for a file whose only writer is the caller, which then
    opens ``path`` again (nothing it wrote is lost)."""
    _make_room(path)
    path.replace(part(path, 1))


def rotate_copying(path: Path) -> None:
    """``path`` is copied to part 1 and emptied; for a file another process holds open
    in append mode (a role's stderr), whose next write lands at the new start. What it
    writes between the copy and the truncation is lost: a window of microseconds, as
    with logrotate's ``copytruncate``."""
    _make_room(path)
    shutil.copyfile(path, part(path, 1))
    os.truncate(path, 0)


class SizeLimit:
    """Rotates (by copying) each of a set of files another process appends to once it
    is past ``max_bytes``; looked at every ``every_s`` seconds at most."""

    def __init__(self, max_bytes: int, every_s: float = 5.0) -> None:
        self.max_bytes = max_bytes
        self.every_s = every_s
        self.rotations = 0
        self._next_at = 0.0

    def tend(self, paths: list[Path], now: float) -> None:
        if now < self._next_at:
            return
        self._next_at = now + self.every_s
        for path in paths:
            try:
                if path.stat().st_size > self.max_bytes:
                    rotate_copying(path)
                    self.rotations += 1
            except OSError:  # gone, or a full disk: the next look tries again
                continue
