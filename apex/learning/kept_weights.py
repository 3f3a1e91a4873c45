"""The agent a run is judged by, kept: the weights of its confirmed solve and of its best
periodic evaluation, written by the evaluator (which holds the very arrays it played)
beside the run's checkpoints.

A run's checkpoints hold the learner's newest weights, trained on past the version the
evaluator confirmed (a run that solved at version 234 kept 238, which played 292 where
234 had played 476). So each evaluation whose mean is the best so far writes
:data:`BEST_FILE`, and a confirmation that solves the run writes :data:`SOLVED_FILE`:
the parameters as published, and the facts of the evaluation (``version``, ``env_steps``,
``mean``, ``episodes``, ``confirmation``), in numpy's ``.npz`` format read with
``allow_pickle=False``, written atomically (a temporary file, fsync, rename).
``apex evaluate`` plays the solved weights by default where a run has them.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import numpy as np

from apex.learning.atomic_files import write_atomically

SOLVED_FILE = "solved-weights.npz"
BEST_FILE = "best-weights.npz"
# The key of the facts (UTF-8 JSON bytes) among the parameters.
FACTS_KEY = "__facts__"

logger = logging.getLogger(__name__)


def write(path: Path, arrays: dict[str, np.ndarray], facts: dict) -> None:
    """``arrays`` and ``facts`` to ``path``, atomically.

    Raises:
        OSError: the write failed; what was at ``path`` stays as it was.
    """
    if FACTS_KEY in arrays:
        raise ValueError(f"a parameter may not be named {FACTS_KEY}")
    encoded = np.frombuffer(json.dumps(facts).encode(), dtype=np.uint8)
    write_atomically(path, lambda handle: np.savez(handle, **arrays, **{FACTS_KEY: encoded}))


def read(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """The parameters and facts :func:`write` wrote.

    Raises:
        ValueError: not such a file (truncated, another format, no facts).
        OSError: it cannot be read.
    """
    try:
        # The file is opened here: numpy's own handle leaks when the zip is damaged.
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except OSError:
        raise
    except Exception as exc:  # zipfile's BadZipFile, a truncated array, a pickled one
        raise ValueError(f"{path}: not a file of kept weights ({exc})") from None
    if FACTS_KEY not in arrays:
        raise ValueError(f"{path}: not a file of kept weights (no facts)")
    try:
        facts = json.loads(arrays.pop(FACTS_KEY).tobytes().decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: its facts are not JSON ({exc})") from None
    return arrays, facts


class KeptWeights:
    """The evaluator's keeper of the best and the solving weights in ``directory``; safe to
    call from every evaluation lane."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self.failed = 0
        self._best: float | None = None
        best = directory / BEST_FILE
        if best.exists():  # a restarted evaluator: the best so far stays the bar
            try:
                self._best = float(read(best)[1]["mean"])
            except (OSError, ValueError, KeyError, TypeError):
                logger.warning("%s unreadable: the next evaluation replaces it", best)

    def periodic(self, arrays: dict[str, np.ndarray], facts: dict) -> None:
        """A periodic evaluation: kept if its mean is the best so far."""
        with self._lock:
            if self._best is not None and facts["mean"] <= self._best:
                return
            if self._write(BEST_FILE, arrays, facts):
                self._best = facts["mean"]

    def solved(self, arrays: dict[str, np.ndarray], facts: dict) -> None:
        """The confirmation that solved the run."""
        with self._lock:
            self._write(SOLVED_FILE, arrays, facts)

    def _write(self, name: str, arrays: dict[str, np.ndarray], facts: dict) -> bool:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write(self.directory / name, arrays, facts)
        except OSError as exc:
            self.failed += 1
            logger.error("%s not written (%s); %d failed so far", name, exc, self.failed)
            return False
        logger.info(
            "kept weights %d (mean %.1f over %d episodes) as %s",
            facts["version"],
            facts["mean"],
            facts["episodes"],
            name,
        )
        return True
