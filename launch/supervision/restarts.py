"""How a dead role is restarted: after a back-off that grows while it keeps dying, and
within a budget of restarts *in a row*. A role that ran healthy for ``HEALTHY_AFTER_S``
before it died starts a new streak: a long run whose actor, shard or evaluator dies now
and then (a simulator's crash, the OOM killer, a chaos schedule) restarts it after a
second each time and never runs out of budget, while one that dies as it starts backs
off to ``RESTART_BACKOFF_S[-1]`` and is given up.
"""

from __future__ import annotations

import time

# Restarts in a row after which a role is given up: a learner (it ends the run), a shard
# (the run goes on with the others while any is left), the evaluator.
LEARNER_RESTART_BUDGET = 3
SHARD_RESTART_BUDGET = 5
RESTART_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
# A life this long ends a streak of restarts.
HEALTHY_AFTER_S = 60.0


class RestartStreak:
    """One role's restarts: ``total`` over the run, ``in_a_row`` since it last ran
    healthy."""

    def __init__(self) -> None:
        self.total = 0
        self.in_a_row = 0
        self._started_at = time.monotonic()
        self._died_at: float | None = None

    def started(self) -> None:
        """A life begins."""
        self._started_at, self._died_at = time.monotonic(), None

    def died(self) -> int:
        """Its life has ended (asked again until it restarts, the same answer): the
        restarts in a row before this death, 0 after a healthy life."""
        if self._died_at is None:
            self._died_at = time.monotonic()
            if self._died_at - self._started_at >= HEALTHY_AFTER_S:
                self.in_a_row = 0
        return self.in_a_row

    def backoff_s(self) -> float:
        """How long to wait before the next start."""
        return RESTART_BACKOFF_S[min(self.in_a_row, len(RESTART_BACKOFF_S) - 1)]

    def restarting(self) -> None:
        self.total += 1
        self.in_a_row += 1
