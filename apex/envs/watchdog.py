"""A watchdog for env steps: one that does not come back is found, said and ended.

A user's simulator may hang in a step (a deadlock, a lost connection, a solver that does
not converge). The actor's thread is then inside the step and can neither report nor
stop, so a thread of its own watches the step under way (the actor marks where its env
steps begin and end):

- from ``stuck_after_s`` on (``apex.channels.STUCK_AFTER_S`` for an actor), it sends the
  actor's heartbeats itself, every ``beat_every_s``, on a socket of its own, saying how
  long the envs have been in the step (``stuck_s``), so the learner, ``apex top`` and the
  live view show the actor as stuck rather than well;
- at ``actor.step_timeout_s`` it logs which copy hung, where and for how long (named from
  ``apex.envs.guard.IN_STEP`` where the copies step in this process), and ends the
  process with :data:`EXIT_ENV_HUNG`: the supervisor restarts the actor and counts it.
  A step cannot be taken back from a thread; only the process can go.

The evaluator keeps one too, without marks: the copies that step in its process say when
their step began (``IN_STEP``), and a hung one ends it the same way (its keeper restarts
it, ``launch.evaluator_process``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from apex.envs.guard import IN_STEP

# An actor whose env hung in a step exits with this code (launch/README.md's table).
EXIT_ENV_HUNG = 4
# How often the watchdog looks.
WATCH_PERIOD_S = 0.1

logger = logging.getLogger(__name__)


def hung_copy(now: float) -> str:
    """Which of this process's copies is in the oldest step, as words ("env copy 3 in
    step"), or "an env copy" where none steps here (in processes of their own)."""
    if not IN_STEP:
        return "an env copy"
    index, where, _ = min(list(IN_STEP.values()), key=lambda entry: entry[2])
    return f"env copy {index} in {where}"


class StepWatchdog:
    """Watches the actor's env steps (the module's notes).

    Args:
        timeout_s: a step this long is a hang (None: never; only the heartbeats).
        heartbeat: sends a heartbeat that says the envs have been in a step this many
            seconds; called on the watchdog's thread, so it must use a socket of its own.
        hung: called with the reason, on the watchdog's thread, in place of ending the
            process (tests); by default the process exits with :data:`EXIT_ENV_HUNG`.
        stuck_after_s, beat_every_s: when a step is long enough for ``heartbeat``, and
            how often it is called from then on.
    """

    def __init__(
        self,
        timeout_s: float | None,
        heartbeat: Callable[[float], None],
        hung: Callable[[str], None] | None = None,
        stuck_after_s: float = 2.0,
        beat_every_s: float = 1.0,
    ) -> None:
        self._timeout_s = timeout_s
        self._heartbeat = heartbeat
        self._hung = hung or _exit_hung
        self._stuck_after_s, self._beat_every_s = stuck_after_s, beat_every_s
        self._since: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
        self._thread.start()

    def stepping(self) -> None:
        """The actor's envs begin a step (or reset)."""
        self._since = time.monotonic()

    def stepped(self) -> None:
        """They are out of it."""
        self._since = None

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=1.0)

    def _watch(self) -> None:
        last_beat = 0.0
        while not self._done.wait(WATCH_PERIOD_S):
            now = time.monotonic()
            since = _earliest(self._since, IN_STEP)
            if since is None:
                continue
            age = now - since
            if self._timeout_s is not None and age >= self._timeout_s:
                self._hung(
                    f"{hung_copy(now)} hung for {age:.0f} s "
                    f"(actor.step_timeout_s = {self._timeout_s:g})"
                )
                return
            if age >= self._stuck_after_s and now - last_beat >= self._beat_every_s:
                last_beat = now
                self._heartbeat(age)


def _earliest(since: float | None, in_step: dict) -> float | None:
    """The start of the oldest step under way: the one marked, or a copy's."""
    starts = [start for _, _, start in list(in_step.values())]
    if since is not None:
        starts.append(since)
    return min(starts) if starts else None


def _exit_hung(reason: str) -> None:
    logger.error("EnvHung: %s; the process exits (code %d) to be restarted", reason, EXIT_ENV_HUNG)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_ENV_HUNG)
