"""Files written whole or not at all: a run's checkpoints and kept weights must never be
found half written by a crash or a full disk. Kept free of torch, so that the evaluator
(which acts in numpy on vector observations) writes its files without importing it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write(handle)`` into a temporary file beside ``path``, synced to disk, then renamed
    to it: ``path`` is the old file or the whole new one, never part of one.

    Raises:
        OSError: the write failed; the temporary file is removed.
    """
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
