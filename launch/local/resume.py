"""What ``apex train --resume`` continues from, and what its limits mean there.

A resumed run's ``--max-time`` and ``--max-updates`` are more time and more updates on
top of what its newest checkpoint has done; the limits its config already holds are
totals. A resume whose total limit is already reached is refused with the figures,
before anything starts, instead of starting every role only to stop at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from launch.run_files import CHECKPOINTS_DIR


@dataclass(frozen=True)
class TrainedSoFar:
    """What a run's newest readable checkpoint has done (nothing without one)."""

    updates: int = 0
    train_seconds: float = 0.0
    checkpoint: Path | None = None
    skipped: tuple[str, ...] = ()
    """Why each newer checkpoint was not read (a full disk truncated it, say)."""
    newest_updates: int = 0
    """The updates the newest checkpoint's name says it holds, read or not."""

    @classmethod
    def read(cls, run_dir: Path) -> TrainedSoFar:
        from apex.learning import checkpoint

        directory = run_dir / CHECKPOINTS_DIR
        path, refused = checkpoint.latest_readable(directory)
        newest = checkpoint.latest(directory)
        newest_updates = int(newest.stem.split("-")[1]) if newest is not None else 0
        if path is None:
            return cls(skipped=tuple(refused), newest_updates=newest_updates)
        counters = json.loads(checkpoint.load(path)["counters"])
        return cls(
            int(counters["updates"]),
            float(counters["train_seconds"]),
            path,
            tuple(refused),
            newest_updates,
        )

    def more(self, max_updates: int | None, max_time: float | None):
        """``--max-updates`` and ``--max-time`` of a resume as the totals the learner
        stops at."""
        return (
            None if max_updates is None else self.updates + max_updates,
            None if max_time is None else self.train_seconds + max_time,
        )

    def limit_reached(self, max_updates: int | None, max_time_s: float | None) -> str | None:
        """Why a resume with these total limits would stop at once, or None."""
        if max_updates is not None and self.updates >= max_updates:
            return (
                f"the run already did {self.updates} updates of its limit of {max_updates}; "
                "give --max-updates N to train N updates more"
            )
        if max_time_s is not None and self.train_seconds >= max_time_s:
            return (
                f"the run already trained {self.train_seconds:.0f} s of its limit of "
                f"{max_time_s:.0f} s; give --max-time S to train S seconds more"
            )
        return None

    def describe(self) -> str:
        lost = ""
        if self.skipped:
            lost = (
                f"; {len(self.skipped)} newer checkpoint(s) unreadable, "
                f"{self.newest_updates - self.updates:,} updates lost with them "
                f"({'; '.join(self.skipped)})"
            )
        if self.checkpoint is None:
            return f"no readable checkpoint: the learner starts from scratch{lost}"
        return (
            f"from {self.checkpoint.name}: {self.updates} updates and "
            f"{self.train_seconds:.0f} s trained so far{lost}"
        )
