"""One role (or a benchmark worker) as a child process: spawned with its stderr in a log,
its JSON lines on stdout read with a deadline, stopped with SIGTERM and then SIGKILL within
a time budget. The supervisor, the tests and the benchmarks start every process this way.

A role prints one JSON line once it is bound (``{"ready": {...}}``) and may print more
(``{"outcome": ...}``, a worker's ``{"rates": ...}``); everything it logs goes to stderr,
which goes to a file: a pipe nobody reads could fill and block the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from launch.supervision.log_reasons import role_failure


class RoleStartError(RuntimeError):
    """A child that printed no ready line: its own last error line and its log say why."""


class RoleProcess:
    """A child process and its log.

    Args:
        command: the argument vector.
        log_path: where its stderr goes (appended: a restarted role keeps one log); None:
            a temporary file, removed when the process is closed.
        env: its environment (default: this one), always with ``PYTHONUNBUFFERED=1``.
        cwd: its working directory.
        own_session: start it in a session of its own, so that a Ctrl-C on the terminal
            reaches only the parent, which then stops it in order.
        name: how messages name it (``shard 0``); default: the command's module.
    """

    def __init__(
        self,
        command: list[str],
        log_path: Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        own_session: bool = False,
        name: str | None = None,
    ) -> None:
        self.command = list(command)
        self.name = name or " ".join(command[2:4] if command[1:2] == ["-m"] else command[:1])
        self.log_path = log_path
        self.output_closed = False
        """Its stdout reached its end (it exited, or closed it)."""
        self._log: IO | None = None
        if log_path is None:
            self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in close())
                mode="w+b", prefix="apex-role-", suffix=".log"
            )
            self.log_path = Path(self._log.name)
            stderr: IO | int = self._log
        else:
            stderr = log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self.command,
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                cwd=cwd,
                start_new_session=own_session,
                env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
            )
        finally:
            if log_path is not None:
                stderr.close()  # the child holds its own descriptor

    @classmethod
    def apex(cls, *arguments: str, **options) -> RoleProcess:
        """``python -m launch ARGUMENTS`` (``apex ARGUMENTS``) with this interpreter."""
        return cls([sys.executable, "-m", "launch", *arguments], **options)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def read_line(self, timeout_s: float) -> dict | None:
        """The next JSON line it prints, or None when none comes within ``timeout_s`` or it
        closed its output (exited)."""
        stdout = self.process.stdout
        if stdout is None or stdout.closed:
            return None
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                return None
        line = stdout.readline()
        if not line:
            self.output_closed = True
        return json.loads(line) if line.strip() else None

    def await_ready(self, timeout_s: float) -> dict:
        """Its ready payload (``{"ready": payload}``).

        Raises:
            RoleStartError: none within ``timeout_s``; the message carries the child's own
                last error line and its log's path.
        """
        return self.expect("ready", timeout_s)

    def expect(self, key: str, timeout_s: float):
        """The value of its next JSON line, which must be ``{key: value}``.

        Raises:
            RoleStartError: no such line within ``timeout_s`` (another line, none, or an
                exit), with the child's own last error line and its log's path.
        """
        message = self.read_line(timeout_s)
        if message and key in message:
            return message[key]
        if message is None and not self.output_closed and self.process.poll() is None:
            what = f"{self.name} printed no {key} line within {timeout_s:g} s"
        elif message is not None:
            what = f"{self.name} printed {str(message)[:200]} where {key} was expected"
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5.0)  # its log is complete once it has exited
            verb = "did not start" if key == "ready" else f"exited before its {key} line"
            what = f"{self.name} {verb} (exit code {self.process.poll()})"
        raise RoleStartError(role_failure(what, self.log_path))

    def terminate(self) -> None:
        """Asks it to stop (SIGTERM) if it still runs; returns at once."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_or_kill(self, deadline: float) -> tuple[int, bool]:
        """Waits for it to exit until ``deadline`` (``time.monotonic``), then kills it;
        its exit code, and whether it had to be killed."""
        try:
            return self.process.wait(max(deadline - time.monotonic(), 0.1)), False
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(), True

    def stop(self, budget_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL once ``budget_s`` has passed; its exit code."""
        self.terminate()
        code, _ = self.wait_or_kill(time.monotonic() + budget_s)
        return code

    def close(self) -> None:
        """Closes its output pipe and a temporary log (the process must have exited)."""
        if self.process.stdout is not None and not self.process.stdout.closed:
            self.process.stdout.close()
        if self._log is not None:
            self._log.close()


def stop_all(processes: Iterable[RoleProcess], budget_s: float = 10.0) -> list[RoleProcess]:
    """Stops every one of ``processes`` within one shared ``budget_s`` (all asked at once,
    then waited for); closes them; returns those that had to be killed."""
    processes = list(processes)
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + budget_s
    killed = [p for p in processes if p.wait_or_kill(deadline)[1]]
    for process in processes:
        process.close()
    return killed
