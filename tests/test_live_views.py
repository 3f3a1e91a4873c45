"""The live views in a real terminal: `apex train` redrawing its status in place and
`apex top` beside it, both in tmux, read back with capture-pane and driven with
send-keys (q and Ctrl-C). As root (CI) tmux is installed if missing, as the Slurm tests
install Slurm; elsewhere without tmux these skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from apex.learning.metrics import MetricsTail
from launch.cli import main
from launch.views.top import sparkline
from tests.conftest import wait_for, write_run_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tmux() -> str:
    if shutil.which("tmux") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "tmux"]
        for command in (["apt-get", "update", "-qq"], install):
            subprocess.run(command, env=environment, timeout=600, check=False, capture_output=True)
    path = shutil.which("tmux")
    if path is None:
        if os.environ.get("APEX_REQUIRE_SLURM") == "1":  # CI, as root: must run
            pytest.fail("tmux is not installed and could not be")
        pytest.skip("tmux is not installed")
    return path


class Pane:
    """One tmux session running one command; its screen read back as text."""

    def __init__(self, tmux: str, command: str) -> None:
        self.tmux, self.name = tmux, f"apex-test-{uuid.uuid4().hex[:8]}"
        # remain-on-exit keeps the pane, and the exit status printed, after the command ends.
        subprocess.run(
            [
                tmux,
                "new-session",
                "-d",
                "-s",
                self.name,
                "-x",
                "110",
                "-y",
                "45",
                "-c",
                str(REPO),
                f"{command}; echo apex-exit-$?",
                ";",
                "set-option",
                "-t",
                self.name,
                "remain-on-exit",
                "on",
            ],
            check=True,
            timeout=30,
        )

    def screen(self, history: bool = False) -> str:
        start = ["-S", "-"] if history else []
        return subprocess.run(
            [self.tmux, "capture-pane", "-p", "-t", self.name, *start],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([self.tmux, "send-keys", "-t", self.name, *keys], check=True, timeout=30)

    def ended(self) -> int | None:
        """The command's exit status once it has ended (the shell prints it), else None."""
        found = re.search(r"apex-exit-(\d+)", self.screen(history=True))
        return int(found.group(1)) if found else None

    def wait_for(self, condition, timeout_s: float, what: str):
        try:
            return wait_for(condition, timeout_s, what, interval_s=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{self.screen()}") from None

    def close(self) -> None:
        subprocess.run([self.tmux, "kill-session", "-t", self.name], timeout=30, check=False)


@pytest.mark.slow
def test_train_redraws_in_place_and_top_follows_it_until_q(tmux: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    python = sys.executable
    train = Pane(
        tmux, f"{python} -m launch train --run-dir {run_dir} --max-time 15 --target-return 1e9"
    )
    top = None
    try:
        train.wait_for(lambda: "transitions/s" in train.screen(), 90, "the live status")
        shown = train.screen()
        assert "target 1,000,000,000.0" in shown and "time left" in shown
        first = train.screen(history=True)
        # It redraws in place: a later status, and still one status block on the screen.
        train.wait_for(lambda: train.screen(history=True) != first, 10, "a redraw")
        assert train.screen(history=True).count("time left") == 1
        top = Pane(tmux, f"{python} -m launch top {run_dir} --interval 0.5")
        top.wait_for(lambda: "upd/s" in top.screen() and "in/s" in top.screen(), 30, "top")
        screen = top.screen()
        for part in ("learner", "shard 0", "actors", "1 heard", "policy lag", "q quits"):
            assert part in screen, screen
        top.keys("q")
        assert top.wait_for(lambda: top.ended() is not None, 10, "top to quit on q") is not None
        assert top.ended() == 0
        top.close()
        top = Pane(tmux, f"{python} -m launch top {run_dir} --interval 0.5")
        top.wait_for(lambda: "upd/s" in top.screen(), 30, "top again")
        top.keys("C-c")
        top.wait_for(lambda: top.ended() is not None, 10, "top to quit on Ctrl-C")
        assert top.ended() == 0
        # The run ends by its time limit and names its directory and what is in it.
        train.wait_for(lambda: train.ended() is not None, 120, "the run to end")
        history = train.screen(history=True)
        assert train.ended() == 0 and "reason: max_time" in history
        assert "results in" in history and "apex status" in history
        assert (run_dir / "curves.png").stat().st_size > 10_000
    finally:
        train.close()
        if top is not None:
            top.close()


def test_top_once_draws_a_frame_without_a_terminal(tmp_path: Path) -> None:
    write_run_dir(tmp_path)
    result = CliRunner().invoke(main, ["top", "--once", "--interval", "0.1", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for part in ("ended: max_time", "learner", "actors", "402.5 (best 402.5) / target 475.0"):
        assert part in result.output, result.output


def test_sparkline_scales_to_the_target() -> None:
    assert sparkline([0.0, 50.0, 100.0], top=100.0) == "▁▅█"
    assert sparkline([0.0, 50.0], top=100.0) == "▁▅"  # half way to the target
    assert sparkline([]) == ""
    assert len(sparkline(list(range(500)), width=60)) == 60


def test_metrics_tail_reads_only_what_was_appended(tmp_path: Path) -> None:
    tail = MetricsTail(tmp_path)
    assert tail.read() == []  # no file yet
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\n{"c"')  # the last line is still being written
    assert tail.read() == [{"a": 1}, {"b": 2}]
    with open(path, "a") as handle:
        handle.write(': 3}\nnot json\n{"d": 4}\n')
    assert tail.read() == [{"c": 3}, {"d": 4}]
    assert tail.read() == []
