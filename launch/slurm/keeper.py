"""Keeps one role's process alive inside a Slurm task.

Slurm restarts nothing inside a running step: with ``--kill-on-bad-exit=0`` a task that
dies simply stays dead until the job ends (a requeue restarts the whole job). So a shard's
task runs the shard as a child and restarts it, with backoff, when it dies on its own (a
crash, the OOM killer, kill -9 of the shard process); the new shard binds the same ports
and starts from its newest snapshot, and actors and the learner reconnect by themselves.
The learner's task does the same for a learner killed by a signal (kill -9, the OOM
killer), which comes back from its newest checkpoint; a learner that ends by itself (an
outcome, or an error that would only repeat) ends the task. On a stop signal (SIGTERM from
``scancel`` or the batch script, which Slurm sends to every process of the step) the child
writes its final snapshot and exits, and the keeper ends with its exit code.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from launch.supervision.restarts import SHARD_RESTART_BUDGET, RestartStreak
from launch.supervision.signals import on_stop_signal

logger = logging.getLogger(__name__)


def run_restarting(
    command: list[str],
    what: str,
    budget: int = SHARD_RESTART_BUDGET,
    forward_after_s: float = 30.0,
    restart_if: Callable[[int], bool] = lambda code: True,
) -> int:
    """Runs ``command`` until it ends after a stop signal, restarting it up to ``budget``
    times in a row (``launch.supervision.restarts``) when it ends on its own with an exit code
    that ``restart_if`` accepts (a negative code: killed by that signal); returns its last
    exit code.

    A stop signal is not passed on at once: Slurm signals every process of the step, the
    child included, so passing it on would only repeat it (``launch.supervision.signals``:
    a repeated SIGTERM is the same request). Only a child still running
    ``forward_after_s`` after the stop (the signal came to the keeper alone) gets it.
    """
    stopping = threading.Event()
    # As the roles take it (``launch.supervision.signals``): a repeated TERM is the same stop, also
    # while this process shuts down, where a handler is back to the default and a job
    # end's second TERM (the learner's task, then the batch script) killed an actor task
    # that had stopped cleanly (exit 143, the job FAILED: seen in CI).
    on_stop_signal(stopping.set)
    streak = RestartStreak()
    while True:
        streak.started()
        child = subprocess.Popen(command)
        code = _wait(child, stopping, forward_after_s)
        if stopping.is_set() and code == -signal.SIGTERM:
            # A role takes TERM as its stop once its handler is in place, before it takes
            # any data; one that dies of it was still starting (a restarted actor
            # importing torch when the job ended: the job FAILED, seen in CI), and the
            # stop it was sent is the one that happened.
            logger.info("%s stopped while starting up", what)
            return 0
        if stopping.is_set() or not restart_if(code):
            return code
        if streak.died() >= budget:
            logger.error(
                "%s died (exit code %d) after %d restarts in a row; giving up",
                what,
                code,
                streak.in_a_row,
            )
            return code
        delay = streak.backoff_s()
        logger.warning("%s died (exit code %d); restarting in %.0f s", what, code, delay)
        if stopping.wait(delay):
            return code
        streak.restarting()


def _wait(child: subprocess.Popen, stopping: threading.Event, forward_after_s: float) -> int:
    forward_at = None
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return child.wait(timeout=0.2)
        if stopping.is_set():
            now = time.monotonic()
            forward_at = forward_at or now + forward_after_s
            if now >= forward_at:
                child.send_signal(signal.SIGTERM)
                forward_at = float("inf")
