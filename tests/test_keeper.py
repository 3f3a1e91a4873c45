"""The keeper behind a Slurm shard task restarts its child when it dies on its own, and
on a stop signal lets the child stop (passing the signal on only if the child did not get
it too) instead of restarting it; the roles take a repeated SIGTERM as the same stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import wait_for

# Dies at its first start (as a killed shard would), then waits for SIGTERM and exits 0.
CHILD = """
import pathlib, signal, sys
marker = pathlib.Path(sys.argv[1])
starts = int(marker.read_text()) if marker.exists() else 0
marker.write_text(str(starts + 1))
if starts == 0:
    sys.exit(7)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
"""

KEEPER = """
import sys
from launch.slurm.keeper import run_restarting
command = [sys.executable, "-c", sys.argv[1], sys.argv[2]]
sys.exit(run_restarting(command, "child", budget=3, forward_after_s=0.5))
"""


def test_a_dead_child_is_restarted_and_a_stop_is_passed_on(tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    keeper = subprocess.Popen(
        [sys.executable, "-c", KEEPER, CHILD, str(marker)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(
            lambda: marker.exists() and marker.read_text() == "2",
            timeout_s=30,
            what="the restarted child",
            interval_s=0.05,
        )
        keeper.send_signal(signal.SIGTERM)
        assert keeper.wait(10) == 0
        errors = keeper.stderr.read()
    finally:
        if keeper.poll() is None:
            keeper.kill()
        keeper.stderr.close()
    assert marker.read_text() == "2"  # started twice: not again after the stop
    assert "child died (exit code 7); restarting in 1 s" in errors


def test_the_keeper_gives_up_after_its_budget(tmp_path: Path) -> None:
    always_dies = "import sys; sys.exit(5)"
    keeper = subprocess.run(
        [sys.executable, "-c", KEEPER.replace("budget=3", "budget=1"), always_dies, "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert keeper.returncode == 5
    assert "after 1 restarts in a row; giving up" in keeper.stderr


# Takes a while to stop after its first SIGTERM, and a second one kills it (as the roles do).
SLOW_STOPPER = """
import signal, sys, threading
done = threading.Event()
def first(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    done.set()
signal.signal(signal.SIGTERM, first)
print("up", flush=True)
done.wait()
done.clear()
done.wait(1.0)  # the final snapshot
sys.exit(0)
"""


def _keeper_exit_after_a_step_signal(keeper_code: str, child_code: str) -> int:
    """The exit status of a keeper of ``child_code`` once the child is up and the whole
    process group gets SIGTERM, as slurmstepd sends a step's tasks."""
    keeper = subprocess.Popen(
        [sys.executable, "-c", keeper_code, child_code, "x"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert keeper.stdout.readline().strip() == "up"
        os.killpg(keeper.pid, signal.SIGTERM)
        return keeper.wait(20)
    finally:
        if keeper.poll() is None:
            keeper.kill()
        keeper.stdout.close()


def test_a_signal_to_the_whole_step_reaches_the_child_once() -> None:
    keeper_code = KEEPER.replace("forward_after_s=0.5", "forward_after_s=10.0")
    # The child finished its stop, not killed by a second signal.
    assert _keeper_exit_after_a_step_signal(keeper_code, SLOW_STOPPER) == 0


# The roles' stop handler: counts stop requests, then is interrupted by a second SIGINT.
STOP_HANDLER = """
import signal
from launch.supervision.signals import on_stop_signal
# As in a foreground process: one started in the background by a shell without job
# control starts with SIGINT ignored, and Python then leaves it so.
signal.signal(signal.SIGINT, signal.default_int_handler)
stops = []
on_stop_signal(lambda: stops.append(1))
signal.raise_signal(signal.SIGTERM)
signal.raise_signal(signal.SIGTERM)
print(len(stops), signal.getsignal(signal.SIGTERM) == signal.SIG_IGN, flush=True)
try:
    signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGINT)
except KeyboardInterrupt:
    print("interrupted", len(stops))
"""


def test_a_repeated_sigterm_asks_again_and_a_second_sigint_interrupts() -> None:
    """A Slurm job's end sends its steps more than one SIGTERM (the learner's task and the
    batch script both stop them): a role must go on with its clean stop, not die, even
    when the second comes while the interpreter shuts down, where Python has put its
    handlers back to the default (an ignored signal stays ignored)."""
    result = subprocess.run(
        [sys.executable, "-c", STOP_HANDLER],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "True", "interrupted", "2"]


# A role that ends by itself: nothing stopped it, and it exits as a TERM comes.
ENDS_BY_ITSELF = """
import atexit, signal
from launch.supervision.signals import on_stop_signal
on_stop_signal(lambda: None)
atexit._run_exitfuncs()
print(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN, flush=True)
"""


def test_a_role_that_ends_by_itself_ignores_a_sigterm_while_it_exits() -> None:
    """A learner that solved is exiting when the supervisor, stopped by the user, sends it
    SIGTERM: Python's default handler, put back during shutdown, killed it (exit -15, an
    unclean stop) though its final checkpoint was written."""
    result = subprocess.run(
        [sys.executable, "-c", ENDS_BY_ITSELF],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True"]


# Exits 0 on its first TERM; the keeper then takes another TERM as the job's end sends it.
KEEPER_AFTER_ITS_STOP = """
import signal, sys
from launch.slurm.keeper import run_restarting
child = ("import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
         "print('up', flush=True); signal.pause()")
code = run_restarting([sys.executable, "-c", child], "child", budget=0, forward_after_s=0.1)
ignored = signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
signal.raise_signal(signal.SIGTERM)
print("ignored" if ignored else "handled", code, flush=True)
"""


def test_the_keeper_survives_a_second_sigterm_after_its_stop() -> None:
    """A job's end sends its steps more than one TERM: the keeper, its child stopped,
    must not die of the second while it shuts down (its handler then back to the
    default): an ignored signal stays ignored, so the task ends with its child's code."""
    keeper = subprocess.Popen(
        [sys.executable, "-c", KEEPER_AFTER_ITS_STOP], stdout=subprocess.PIPE, text=True
    )
    try:
        assert keeper.stdout.readline().strip() == "up"
        keeper.send_signal(signal.SIGTERM)
        assert keeper.wait(20) == 0
        assert keeper.stdout.read().split() == ["ignored", "0"]
    finally:
        if keeper.poll() is None:
            keeper.kill()
        keeper.stdout.close()


# A role still starting up: no stop handler yet, so SIGTERM kills it.
STARTING_UP = "import signal; print('up', flush=True); signal.pause()"


def test_a_child_stopped_while_it_starts_up_ends_the_task_cleanly() -> None:
    """A restarted actor still importing its modules when the job ends dies of the TERM
    that stops the step: that is the stop the job asked for, not a failure of the task."""
    assert _keeper_exit_after_a_step_signal(KEEPER, STARTING_UP) == 0  # not 241: -SIGTERM


def test_a_healthy_life_starts_a_new_streak_of_restarts(monkeypatch) -> None:
    from launch.supervision import restarts

    streak = restarts.RestartStreak()
    for _ in range(3):  # dies as it starts: the back-off grows, the streak too
        streak.started()
        assert streak.died() == streak.in_a_row
        streak.restarting()
    assert (streak.in_a_row, streak.total, streak.backoff_s()) == (3, 3, 8.0)
    monkeypatch.setattr(restarts, "HEALTHY_AFTER_S", 0.0)  # this life ran long enough
    streak.started()
    assert streak.died() == 0 and streak.died() == 0 and streak.backoff_s() == 1.0
    streak.restarting()
    assert (streak.in_a_row, streak.total) == (1, 4)
