"""The local supervisor's stop: a shard or learner that does not stop cleanly fails the
run, whatever its training outcome, and says which one and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from launch.config import resolve
from launch.local.supervisor import Child, Supervisor
from launch.roles import EXIT_FAILED, EXIT_OK
from launch.supervision.role_process import RoleProcess

# A role that says it is ready and, told to stop, crashes (as libzmq's abort did) or
# stops cleanly.
ROLE = """
import os, signal, sys
clean = sys.argv[1] == "clean"
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0) if clean else os.abort())
print('{"ready": {}}', flush=True)
signal.pause()
"""


def _child(role: str, how: str, tmp_path: Path) -> Child:
    log_path = tmp_path / f"{role}.log"
    child = Child(role, 0, [sys.executable, "-c", ROLE, how], log_path)
    child.process = RoleProcess(child.command, log_path, name=role)
    child.process.await_ready(30)
    return child


def test_a_shard_that_crashes_while_stopping_fails_the_run(tmp_path: Path) -> None:
    lines: list[str] = []
    supervisor = Supervisor(resolve({}, {"actors": 1}), tmp_path / "run", False, lines.append)
    crashing, clean = _child("shard", "abort", tmp_path), _child("learner", "clean", tmp_path)
    supervisor._children = [crashing, clean]
    summary = supervisor._finish(EXIT_OK, "max_time", {"updates": 10})
    supervisor._stop_all()
    summary = supervisor._account_stops(summary)
    assert summary.exit_code == EXIT_FAILED
    assert len(summary.unclean_stops) == 1, summary.unclean_stops
    assert "shard 0 exited with code -6 while stopping" in summary.unclean_stops[0]
    assert "final snapshot may be missing" in summary.unclean_stops[0]
    assert any(line.startswith("error: shard 0 exited") for line in lines), lines
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["exit_code"] == EXIT_FAILED and "unclean stops: 1" in written["line"]


def test_roles_that_stop_cleanly_leave_the_outcome_alone(tmp_path: Path) -> None:
    supervisor = Supervisor(resolve({}, {"actors": 1}), tmp_path / "run", False, print)
    supervisor._children = [_child("shard", "clean", tmp_path), _child("actor", "abort", tmp_path)]
    summary = supervisor._finish(EXIT_OK, "max_time", {})
    supervisor._stop_all()
    assert supervisor._account_stops(summary).exit_code == EXIT_OK  # an actor keeps nothing
