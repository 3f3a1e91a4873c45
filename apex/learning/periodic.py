"""Work the learner does between updates, each on its own period: one small scheduler.

Publishing weights, reading episode reports, evaluating, writing metrics and checkpointing
all run on the training thread between steps. Each is registered once with its period, in
seconds or in updates (or both: whichever comes first), instead of each keeping its own
timestamp in the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# A task returns True to ask the loop to stop (e.g. an evaluation that solved the task).
Task = Callable[[], bool | None]


@dataclass
class _Entry:
    name: str
    task: Task
    every_s: float | None
    every_updates: int | None
    last_s: float
    last_updates: int


class Periodic:
    """Runs registered tasks when their period has passed.

    Args:
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: list[_Entry] = []

    def every(
        self,
        name: str,
        task: Task,
        *,
        seconds: float | None = None,
        updates: int | None = None,
        start_updates: int = 0,
    ) -> None:
        """Registers ``task`` to run every ``seconds`` and/or every ``updates`` updates
        (counted from ``start_updates``); with neither, it runs at every call of
        :meth:`run_due`.

        Raises:
            ValueError: a period that is not positive.
        """
        if (seconds is not None and not seconds > 0) or (updates is not None and updates <= 0):
            raise ValueError(f"{name}: periods must be > 0, got {seconds} s, {updates} updates")
        self._entries.append(_Entry(name, task, seconds, updates, self._clock(), start_updates))

    def run_due(self, updates: int) -> str | None:
        """Runs every task that is due, in registration order.

        Returns:
            The name of the first task that asked to stop (the rest are not run), or None.
        """
        now = self._clock()
        for entry in self._entries:
            due_s = entry.every_s is not None and now - entry.last_s >= entry.every_s
            due_updates = (
                entry.every_updates is not None
                and updates - entry.last_updates >= entry.every_updates
            )
            if not (
                due_s or due_updates or (entry.every_s is None and entry.every_updates is None)
            ):
                continue
            entry.last_s, entry.last_updates = now, updates
            if entry.task():
                return entry.name
        return None
