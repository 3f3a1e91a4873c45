"""The learner role's evaluator: started once the learner's sockets are bound, restarted
when it dies on its own, stopped when the learner ends.

It is the learner's child on every launcher (``apex train``, ``apex learner``, a Slurm
task): it needs only the learner's two endpoints and the run's config, so no launcher has
to place it. It reads the learner's resolved config from ``<run_dir>/evaluator/config.json``
(keys included) and logs to ``<run_dir>/logs/evaluator.log``.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from apex.envs.watchdog import EXIT_ENV_HUNG
from launch.config import RunConfig, write_resolved
from launch.run_files import CHECKPOINTS_DIR, LOGS_DIR
from launch.supervision.restarts import SHARD_RESTART_BUDGET, RestartStreak
from launch.supervision.role_process import RoleProcess, RoleStartError

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
STOP_BUDGET_S = 5.0


class EvaluatorProcess:
    """Keeps ``apex evaluator`` running beside the learner until :meth:`stop`.

    Args:
        config: the learner's run config.
        run_dir: the run's directory.
        weights, episodes: the learner's bound endpoints.
    """

    def __init__(self, config: RunConfig, run_dir: Path, weights: str, episodes: str) -> None:
        config_path = write_resolved(config, run_dir / "evaluator")
        (run_dir / LOGS_DIR).mkdir(parents=True, exist_ok=True)
        self._command = (
            "evaluator",
            "--config",
            str(config_path),
            "--weights",
            weights,
            "--episodes",
            episodes,
            "--parent",
            str(os.getpid()),
            "--keep-dir",
            str(run_dir / CHECKPOINTS_DIR),
        )
        self._log = run_dir / LOGS_DIR / "evaluator.log"
        self._stopping = threading.Event()
        # Held while a process is started or stopped: stop() never misses one the keeper
        # is just starting.
        self._lock = threading.Lock()
        self._process: RoleProcess | None = None
        self._streak = RestartStreak()
        self.state = "starting"  # then "up", "restarting" or "given up"
        self.last_exit: int | None = None
        self.hangs = 0  # its exits because an env step hung (apex.envs.watchdog)
        self._watcher = threading.Thread(target=self._keep, name="evaluator", daemon=True)

    def start(self) -> None:
        self._watcher.start()

    def _keep(self) -> None:
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return
                self._streak.started()
                process = self._process = RoleProcess.apex(
                    *self._command, log_path=self._log, name="evaluator"
                )
            try:
                process.await_ready(READY_TIMEOUT_S)
                self.state = "up"
            except RoleStartError as exc:
                logger.error("%s", exc)
            code = process.process.wait()
            if self._stopping.is_set():
                return
            process.close()
            self.last_exit = code
            self.hangs += code == EXIT_ENV_HUNG
            if self._streak.died() >= SHARD_RESTART_BUDGET:
                self.state = "given up"
                logger.error(
                    "evaluator died (exit code %s) after %d restarts in a row; the "
                    "run goes on without evaluations",
                    code,
                    self._streak.in_a_row,
                )
                return
            self.state = "restarting"
            delay = self._streak.backoff_s()
            how = "ended: an env step hung" if code == EXIT_ENV_HUNG else "died"
            logger.warning("evaluator %s (exit code %s); restarting in %.0f s", how, code, delay)
            self._streak.restarting()
            if self._stopping.wait(delay):
                return

    @property
    def restarts(self) -> int:
        return self._streak.total

    def health(self) -> dict:
        """What the learner's progress and end records say of it: ``evaluator`` (starting,
        up, restarting or given up), ``evaluator_restarts`` (``evaluator_hangs`` of them
        because an env step hung) and its last exit code."""
        return {
            "evaluator": self.state,
            "evaluator_restarts": self.restarts,
            "evaluator_hangs": self.hangs,
            "evaluator_last_exit": self.last_exit,
        }

    def stop(self) -> None:
        """Stops it (SIGTERM, then SIGKILL) and its keeper."""
        with self._lock:
            self._stopping.set()
            process = self._process
        if process is not None:
            process.stop(STOP_BUDGET_S)
        self._watcher.join(timeout=STOP_BUDGET_S + 1.0)
        if process is not None:  # closed once the keeper no longer reads it
            process.close()
