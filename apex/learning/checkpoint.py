"""Checkpoints: written atomically (temporary file, fsync, rename), read without pickle
code execution (``torch.load(weights_only=True)`` accepts tensors and plain containers only).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from apex.learning.atomic_files import write_atomically
from apex.learning.progress import LearnerCounters

if TYPE_CHECKING:
    from apex.algorithms.protocols import Algorithm

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^checkpoint-(\d{10})\.pt$")


def save(directory: Path, updates: int, state: dict) -> Path:
    """Writes ``state`` as ``checkpoint-<updates>.pt`` and keeps the newest three.

    Raises:
        OSError: the write failed (a full disk, say); the partial file is removed, so the
            space it took is free again and the older checkpoints stay as they were.
    """
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"checkpoint-{updates:010d}.pt"
    write_atomically(final, lambda handle: torch.save(state, handle))
    for old in every_checkpoint(directory)[:-3]:
        old.unlink(missing_ok=True)
    return final


def _checkpoints(directory: Path) -> list[Path]:
    return [path for path in directory.glob("checkpoint-*.pt") if _NAME.match(path.name)]


def every_checkpoint(directory: Path) -> list[Path]:
    """The checkpoints in ``directory``, oldest first."""
    return sorted(_checkpoints(directory)) if directory.is_dir() else []


def latest(directory: Path) -> Path | None:
    found = every_checkpoint(directory)
    return found[-1] if found else None


def latest_readable(directory: Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint in ``directory`` that loads, and why each newer one did not
    (truncated by a full disk, corrupted, foreign): a damaged newest checkpoint must not
    keep a run from resuming from the one before it."""
    refused = []
    for path in reversed(every_checkpoint(directory)):
        try:
            load(path)
        except ValueError as exc:
            refused.append(str(exc))
            continue
        return path, refused
    return None, refused


def load(path: Path) -> dict:
    """Reads a checkpoint made by :func:`save`.

    Raises:
        ValueError: the file is not a readable checkpoint.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt or foreign file
        raise ValueError(f"{path} is not a readable checkpoint: {exc}") from exc
    # Every algorithm's state holds its policy's network: "online" (DQN's and DPG's) or
    # "network" (IMPALA's); the learner's counters go beside it.
    networks = ("online", "network")
    if (
        not isinstance(state, dict)
        or "counters" not in state
        or not any(isinstance(state.get(name), dict) for name in networks)
    ):
        raise ValueError(f"{path} is not an apex checkpoint")
    return state


class LearnerCheckpoints:
    """A learner's checkpoints in ``directory``: the algorithm's state, the counters and
    the run's resolved config. A write that fails (a full disk) is counted
    in :attr:`failed` and logged; training goes on, and the newest good one stays."""

    def __init__(self, directory: Path, resolved_config: dict) -> None:
        self.directory = directory
        self._config = json.dumps(resolved_config, sort_keys=True)
        self.failed = 0

    @staticmethod
    def restore(path: Path, algorithm: Algorithm) -> LearnerCounters:
        """The counters at ``path``, with ``algorithm`` loaded from it."""
        state = load(path)
        counters = json.loads(state["counters"])
        known = {f.name for f in fields(LearnerCounters)}
        # Counters a run wrote before one was retired (a settle time) are dropped.
        restored = LearnerCounters(**{k: v for k, v in counters.items() if k in known})
        algorithm.load_state_dict({"steps": restored.updates, **state})
        logger.info(
            "resumed from %s at update %d, weights version %d",
            path,
            restored.updates,
            restored.weight_version,
        )
        return restored

    def save(
        self, algorithm: Algorithm, counters: LearnerCounters, train_seconds: float
    ) -> Path | None:
        """A checkpoint at ``counters.updates``, or None when it could not be written.
        ``train_seconds``: the training time so far, this life's included, so that a run
        resumed from a periodic checkpoint (its learner killed) keeps its time budget."""
        state = {
            **algorithm.state_dict(),
            "config": self._config,
            "counters": json.dumps({**asdict(counters), "train_seconds": train_seconds}),
        }
        try:
            return save(self.directory, counters.updates, state)
        except OSError as exc:
            self.failed += 1
            logger.error(
                "checkpoint at update %d not written (%s); %d failed so far",
                counters.updates,
                exc,
                self.failed,
            )
            return None
