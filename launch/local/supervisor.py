"""The local supervisor behind ``apex train``: starts every role as a child process on this
machine, watches them, restarts dead actors, and stops everything in order.

Every role gets its ports from the supervisor, so all start at once; an actor or the
learner simply waits (with timeouts) until the shards answer. Children run in their own
process group, so a Ctrl-C reaches only the supervisor, which then stops them in the
order that loses nothing: actors first, then the learner (which writes its final
checkpoint), then the shards. Each gets SIGTERM, then
SIGKILL once the shared stop budget runs out.

An actor that dies is restarted with exponential backoff. So is a shard, on the same
ports, from its newest snapshot (``RUN_DIR/replay/shard-N``, see
``replay.server.snapshots``): actors and the learner reconnect by themselves. A shard that
dies more than ``replay.restart_budget`` times is given up while another shard lives (the
learner samples the others; actors send them what they kept for it, ``replay.inserts.client``);
the last shard's end ends the run with a message and exit code 3.
A learner that dies without an outcome (killed, crashed) is restarted with ``--resume``
from its newest checkpoint (which carries its training time), up to
``LEARNER_RESTART_BUDGET`` times; the learner ending normally (solved, or a limit
reached) ends the run with its outcome. Shards are given time to write their final
snapshot when stopped; a shard or the learner that does not stop cleanly (a crash, or a
kill once its budget runs out) fails the run with exit code 1, whatever its outcome.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from apex.algorithms.exploration import run_actors
from apex.algorithms.registry import actors_noun, replay_items
from apex.envs.watchdog import EXIT_ENV_HUNG
from apex.learning.file_parts import SizeLimit
from launch import builder
from launch.config import RunConfig, write_resolved
from launch.explain import start_line
from launch.local.ports import free_ports
from launch.roles import EXIT_FAILED, EXIT_OK, EXIT_ROLE_DIED, NORMAL_ENDS
from launch.run_files import LOGS_DIR, write_summary
from launch.run_summary import RunSummary, last_refused, security_mode
from launch.supervision.log_reasons import last_error_line, role_failure
from launch.supervision.restarts import LEARNER_RESTART_BUDGET, RestartStreak
from launch.supervision.role_process import RoleProcess, RoleStartError
from launch.user_modules import roles_environment

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
STOP_BUDGET_S = 20.0
# A stopping shard writes its whole replay to disk first (about 1 GB for 2M Pong frames).
SHARD_STOP_BUDGET_S = 120.0
WATCH_INTERVAL_S = 0.2


@dataclass
class Child:
    role: str
    index: int
    command: list[str]
    log_path: Path
    process: RoleProcess | None = None
    ready: dict = field(default_factory=dict)
    streak: RestartStreak = field(default_factory=RestartStreak)
    restart_at: float | None = None
    given_up: bool = False
    hangs: int = 0  # an actor's exits because an env step hung (apex.envs.watchdog)
    finished: bool = False  # exited 0 by itself: the learner said the run is over

    @property
    def restarts(self) -> int:
        return self.streak.total


class Display(Protocol):
    """What shows a run's progress while it runs."""

    def tick(self) -> None: ...

    def close(self) -> None: ...


class Supervisor:
    """Runs one training job locally.

    Args:
        config: the resolved run config.
        run_dir: the run directory (config, logs, metrics, checkpoints).
        resume: continue from the newest checkpoint in ``run_dir``.
        echo: where messages go (the CLI passes ``click.echo``).
        display: makes, once the roles are up, what shows the run's progress from its run
            directory and ``echo`` (``launch.views.live_view.supervisor_views``); None:
            nothing is shown while it runs.
        while_stopping: run on the run directory while the shards write their last
            snapshots (``apex train`` draws ``curves.png``); None: nothing.
    """

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        resume: bool = False,
        echo=print,
        display: Callable[[Path, Callable[[str], None]], Display] | None = None,
        while_stopping: Callable[[Path], object] | None = None,
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.resume = resume
        self.echo = echo
        self._make_display = display
        self._while_stopping = while_stopping
        self._display: Display | None = None
        self._stop = threading.Event()
        self._children: list[Child] = []
        self._unclean_stops: list[str] = []
        self._first_death: str | None = None  # the first role death, in its own words
        self._started = time.monotonic()
        self._config_path = write_resolved(config, run_dir)
        # The one place this run's spec is computed; shards read it (launch.builder).
        builder.write_spec(run_dir, builder.transition_spec(config))
        (run_dir / LOGS_DIR).mkdir(parents=True, exist_ok=True)
        self._log_limit = SizeLimit(int(config.log_max_mb * 2**20))
        self._roles_environment = roles_environment(config)

    def stop(self) -> None:
        self._stop.set()

    def _command(self, *arguments: str) -> list[str]:
        return [sys.executable, "-m", "launch", *arguments]

    def _spawn(self, child: Child) -> None:
        child.streak.started()
        child.process = RoleProcess(
            child.command,
            child.log_path,
            env=self._roles_environment,
            own_session=True,
            name=f"{child.role} {child.index}",
        )

    def _await_ready(self, child: Child) -> dict:
        try:
            child.ready = child.process.await_ready(READY_TIMEOUT_S)
        except RoleStartError as exc:
            raise RuntimeError(str(exc)) from None
        return child.ready

    def run(self) -> RunSummary:
        """Starts the roles and supervises them until the run ends."""
        config, logs = self.config, self.run_dir / LOGS_DIR
        config_arg = ("--config", str(self._config_path))
        try:
            # Every role gets its ports up front, so all of them start at once instead of
            # one after another (each spends seconds importing torch or numba).
            host = config.host
            weights_port, episodes_port, *pairs = free_ports(host, 2 + 2 * config.shards)
            shard_ports = list(zip(pairs[::2], pairs[1::2], strict=True))
            shard_args = [
                a
                for ports in shard_ports
                for a in ("--shard", f"tcp://{host}:{ports[0]},tcp://{host}:{ports[1]}")
            ]
            for index, (insert_port, request_port) in enumerate(shard_ports):
                command = self._command(
                    "replay",
                    *config_arg,
                    "--shard-index",
                    str(index),
                    "--host",
                    host,
                    "--insert-port",
                    str(insert_port),
                    "--request-port",
                    str(request_port),
                    "--run-dir",
                    str(self.run_dir),
                )
                self._children.append(Child("shard", index, command, logs / f"shard-{index}.log"))
            learner_command = self._command(
                "learner",
                *config_arg,
                "--run-dir",
                str(self.run_dir),
                "--host",
                host,
                "--weights-port",
                str(weights_port),
                "--episodes-port",
                str(episodes_port),
                *shard_args,
            )
            if self.resume:  # apex train --resume: the run's checkpoint, or none may be left
                learner_command.append("--resume-if-any")
            learner = Child("learner", 0, learner_command, logs / "learner.log")
            self._children.append(learner)
            for index in range(config.actors):
                command = self._command(
                    "actor",
                    *config_arg,
                    "--index",
                    str(index),
                    "--weights",
                    f"tcp://{host}:{weights_port}",
                    "--episodes",
                    f"tcp://{host}:{episodes_port}",
                    *shard_args,
                )
                self._children.append(Child("actor", index, command, logs / f"actor-{index}.log"))
            for child in self._children:
                self._spawn(child)
            for child in self._children:
                self._await_ready(child)
            if learner.ready.get("resumed_from"):
                self.echo(f"resumed from {learner.ready['resumed_from']}")
            actors = run_actors(config.to_dict())
            self.echo(
                f"run {self.run_dir}: {config.shards} shard(s), learner, "
                f"{actors['actor_processes']} actor process(es) × {config.actor.envs_per_actor}"
                f" envs = {actors['ape_x_actors']} {actors_noun(config.algorithm)} on {config.env}"
            )
            said = start_line(config)
            if said and not self.resume:
                self.echo(said)
            if self._make_display is not None:
                self._display = self._make_display(self.run_dir, self.echo)
            summary = self._watch(learner)
        except RuntimeError as exc:
            self.echo(f"error: {exc}")
            summary = self._finish(EXIT_ROLE_DIED, f"start failed: {exc}", {})
        finally:
            if self._display is not None:
                self._display.close()
            self._stop_all()
        return self._account_stops(summary)

    def _account_stops(self, summary: RunSummary) -> RunSummary:
        """A run whose shard or learner did not stop cleanly fails, whatever its
        training outcome: what it left on disk to resume from may be incomplete."""
        if not self._unclean_stops:
            return summary
        for stop in self._unclean_stops:
            self.echo(f"error: {stop}")
        summary.unclean_stops = list(self._unclean_stops)
        if summary.exit_code == EXIT_OK:
            summary.exit_code = EXIT_FAILED
        write_summary(self.run_dir, {**summary.__dict__, "line": summary.line()})
        return summary

    def _watch(self, learner: Child) -> RunSummary:
        while not self._stop.is_set():
            if learner.restart_at is None:
                outcome = learner.process.read_line(WATCH_INTERVAL_S)
                if outcome and "outcome" in outcome:
                    result = outcome["outcome"]
                    # Nothing samples any more: the actors stop while the learner writes
                    # its last checkpoint and stops its evaluator, not after.
                    self._terminate([c for c in self._children if c.role == "actor"])
                    returncode, _ = learner.process.wait_or_kill(time.monotonic() + STOP_BUDGET_S)
                    code = EXIT_OK if returncode == 0 else EXIT_FAILED
                    reason = result["reason"]
                    if reason not in NORMAL_ENDS and self._first_death:
                        # What the learner saw (no data) follows from what happened first.
                        reason = f"{self._first_death}; then {reason}"
                    return self._finish(code, reason, result)
            else:
                self._stop.wait(WATCH_INTERVAL_S)
            # Died without an outcome (killed, crashed): back from its newest checkpoint.
            if (
                learner.restart_at is None
                and learner.process.poll() is not None
                and learner.streak.died() >= LEARNER_RESTART_BUDGET
            ):
                died = (
                    f"learner died with exit code {learner.process.poll()} after "
                    f"{learner.streak.in_a_row} restarts in a row"
                )
                return self._finish(EXIT_ROLE_DIED, role_failure(died, learner.log_path), {})
            self._tend(learner)
            for child in self._children:
                if (
                    child.role == "shard"
                    and not (child.given_up or child.finished)
                    and child.process.poll() not in (None, 0)
                    and child.streak.died() >= self.config.replay.restart_budget
                ):
                    code, restarts = child.process.poll(), child.streak.in_a_row
                    died = (
                        f"shard {child.index} died with exit code {code} after {restarts} "
                        "restarts in a row"
                    )
                    if not self._give_up(child):
                        return self._finish(EXIT_ROLE_DIED, role_failure(died, child.log_path), {})
                    self.echo(f"{died}: given up; the run goes on with the other shards")
                if child.role in ("actor", "shard") and not (child.given_up or child.finished):
                    self._tend(child)
            if self._display is not None:
                self._display.tick()
            self._log_limit.tend(sorted((self.run_dir / LOGS_DIR).glob("*.log")), time.monotonic())
        return self._stopped_by_user(learner)

    def _give_up(self, shard: Child) -> bool:
        """Gives ``shard`` up if another shard is still in the run; False if none is."""
        if all(c.given_up for c in self._children if c.role == "shard" and c is not shard):
            return False
        shard.given_up = True
        shard.process.close()
        return True

    def _tend(self, child: Child) -> None:
        """Restarts a dead role after its backoff (a shard from its snapshot, the learner
        from its checkpoint)."""
        now = time.monotonic()
        if child.restart_at is None and child.process.poll() is not None:
            code = child.process.poll()
            if code == 0:  # stopped as told (the run is over), not died: not restarted
                child.finished = True
                return
            child.streak.died()
            delay = child.streak.backoff_s()
            source = {
                "shard": " from its newest snapshot",
                "learner": " from its newest checkpoint",
            }.get(child.role, "")
            if child.role == "learner" and "--resume-if-any" not in child.command:
                child.command.append("--resume-if-any")
            how = f"died (exit code {code})"
            if child.role == "actor":  # its own words: a broken env copy, a hung step
                why = last_error_line(child.log_path)
                if code == EXIT_ENV_HUNG:
                    child.hangs += 1
                    how = f"ended: an env step hung (exit code {code})"
                how += f": {why}" if why else ""
            self._first_death = self._first_death or f"{child.role} {child.index} {how}"
            self.echo(f"{child.role} {child.index} {how}; restarting in {delay:.0f} s{source}")
            child.process.close()
            child.restart_at = now + delay
        elif child.restart_at is not None and now >= child.restart_at:
            child.restart_at = None
            child.streak.restarting()
            self._spawn(child)

    def _stopped_by_user(self, learner: Child) -> RunSummary:
        self.echo("stopping: actors, then the learner (final checkpoint), then the shards")
        self._stop_role("actor")
        self._terminate([learner])
        waiting = learner.restart_at is not None  # dead, between restarts: nothing to read
        outcome = {} if waiting else learner.process.read_line(STOP_BUDGET_S) or {}
        return self._finish(EXIT_OK, "interrupted", outcome.get("outcome", {}))

    def _finish(self, code: int, reason: str, outcome: dict) -> RunSummary:
        summary = RunSummary(
            exit_code=code,
            reason=reason,
            solved=bool(outcome.get("solved")),
            seconds=time.monotonic() - self._started,  # wall clock, process start-up included
            outcome=outcome,
            actor_restarts=sum(c.restarts for c in self._children if c.role == "actor"),
            shard_restarts=sum(c.restarts for c in self._children if c.role == "shard"),
            learner_restarts=sum(c.restarts for c in self._children if c.role == "learner"),
            actor_hangs=sum(c.hangs for c in self._children),
            shards_given_up=sum(c.given_up for c in self._children),
            security=security_mode(self.config.to_dict()["security"]),
            refused=last_refused(self.run_dir),
            items=replay_items(self.config.algorithm),
            **run_actors(self.config.to_dict()),
        )
        write_summary(self.run_dir, {**summary.__dict__, "line": summary.line()})
        return summary

    def _terminate(self, children: list[Child]) -> None:
        for child in children:
            if child.process is not None:
                child.process.terminate()

    def _wait(self, children: list[Child], deadline: float) -> None:
        for child in children:
            if child.process is None:
                continue
            between_lives = child.given_up or child.restart_at is not None  # told already
            code, killed = child.process.wait_or_kill(deadline)
            if killed:
                logger.warning("%s %d did not stop in time; killed", child.role, child.index)
            if child.role == "actor" or between_lives or (code == 0 and not killed):
                continue
            how = "did not stop in time and was killed" if killed else f"exited with code {code}"
            self._unclean_stops.append(
                f"{child.role} {child.index} {how} while stopping; its final "
                f"{'snapshot' if child.role == 'shard' else 'checkpoint'} may be missing "
                f"(see {child.log_path})"
            )

    def _stop_role(self, role: str) -> None:
        children = [c for c in self._children if c.role == role]
        self._terminate(children)
        budget = SHARD_STOP_BUDGET_S if role == "shard" else STOP_BUDGET_S / 3
        self._wait(children, time.monotonic() + budget)

    def _stop_all(self) -> None:
        """Stops the roles in order, and draws ``curves.png`` meanwhile: the learner's
        records are complete once it has stopped, and the shards' final snapshots take
        their time (the picture seconds of CPU)."""
        for role in ("actor", "learner"):
            self._stop_role(role)
        drawing = None
        if self._while_stopping is not None:
            drawing = threading.Thread(
                target=self._while_stopping, args=(self.run_dir,), name="while-stopping"
            )
            drawing.start()
        self._stop_role("shard")
        if drawing is not None:
            drawing.join()
        for child in self._children:
            if child.process is not None:
                child.process.close()
