"""``apex top RUN_DIR``: a live dashboard of a running run, local or Slurm, redrawn in
place until q or Ctrl-C.

It shows per role what it does and what it costs (the learner's updates, each shard's
fill, intake, samples, back-pressure and rejects, the actors' sending), restarts and
faults, policy lag, and the evaluation curve against the target. Shard and learner CPU
come from the run's own progress records, so they are right for roles on other hosts;
processes and memory are read from ``/proc`` and so cover the roles on this host.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
import time
from pathlib import Path

from launch.supervision.processes import cpu_seconds, resident_bytes, run_processes
from launch.views.live_view import duration, evaluation_text, figure, fill_text
from launch.views.status import env_name
from launch.views.watch import RunWatch

SPARKS = "▁▂▃▄▅▆▇█"
ROLES = ("learner", "shard", "actor")


def sparkline(values: list[float], width: int = 60, top: float | None = None) -> str:
    """The last ``width`` values as block characters, scaled from their least to the
    greatest of them and ``top`` (the target, so reaching it fills the block)."""
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max([*values, top] if top is not None else values)
    span = high - low or 1.0
    return "".join(SPARKS[round((v - low) / span * (len(SPARKS) - 1))] for v in values)


class ProcessSampler:
    """CPU cores and memory per role of the run's processes on this host, from the
    change in their CPU time between two samples."""

    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir
        self._before: dict[int, float] = {}
        self._at = time.monotonic()

    def sample(self) -> dict[str, dict]:
        now = time.monotonic()
        interval = max(now - self._at, 1e-3)
        roles: dict[str, dict] = {}
        seconds = {}
        for pid, role in run_processes(self._run_dir).items():
            used = cpu_seconds(pid)
            if used is None:
                continue
            seconds[pid] = used
            entry = roles.setdefault(role, {"processes": 0, "cpu_cores": 0.0, "rss": 0})
            entry["processes"] += 1
            entry["rss"] += resident_bytes(pid) or 0
            if pid in self._before:
                entry["cpu_cores"] += (used - self._before[pid]) / interval
        self._before, self._at = seconds, now
        return roles


def _fill(shard: dict) -> str:
    size, capacity = shard.get("size"), shard.get("capacity")
    if size is None or not capacity:
        return "?"
    return f"{100 * size / capacity:.0f}% of {capacity:,}"


def _megabytes(value: int | None) -> str:
    return "–" if not value else f"{value / 2**20:,.0f} MB"


def dashboard(watch: RunWatch, local: dict[str, dict]):
    """The dashboard for the current state of ``watch`` (``local``: ProcessSampler's)."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table

    progress = watch.progress or {}
    env = env_name(watch.config)
    head = (
        f"[bold]{watch.run_dir}[/] ({env}) – {watch.state()} – training "
        f"{duration(progress.get('time_s'))} – time left {duration(watch.time_left_s())}"
        "   [dim]q quits[/]"
    )
    roles = Table(expand=True, title="roles", title_justify="left")
    for column in ("role", "procs", "CPU", "memory", "rate", "state"):
        roles.add_column(
            column,
            justify="left" if column in ("role", "state") else "right",
            no_wrap=column != "state",
        )
    learner = local.get("learner", {})
    learner_cpu = watch.learner_cpu_cores()
    roles.add_row(
        "learner",
        str(learner.get("processes", "–")),
        figure(learner_cpu if learner_cpu is not None else learner.get("cpu_cores"), 2),
        _megabytes(learner.get("rss")),
        f"{figure(progress.get('updates_per_s'))} upd/s",
        f"{watch.updates():,} updates, {figure(progress.get('samples_per_s'))} samples/s",
    )
    shards_here = local.get("shard", {})
    shard_rows = watch.shard_rows()
    for shard in shard_rows:
        state = [f"replay {_fill(shard)}", f"sampled {figure(shard.get('samples_per_s'), 1)}/s"]
        if shard.get("rejected_total"):
            state.append(f"[red]rejected {shard['rejected_total']}[/]")
        if shard.get("inserts_waiting"):
            state.append("[yellow]inserts held (rate limiter)[/]")
        if shard.get("samples_waiting"):
            state.append(f"[yellow]{shard['samples_waiting']} samples waiting[/]")
        roles.add_row(
            f"shard {shard['index']}" + ("" if shard["alive"] else " [red]down[/]"),
            "",
            figure(shard.get("cpu_cores"), 2),
            "",
            f"{figure(shard.get('in_per_s'))} in/s",
            ", ".join(state),
        )
    if shards_here:
        roles.add_row(
            "(shards here)",
            str(shards_here["processes"]),
            "",
            _megabytes(shards_here["rss"]),
            "",
            "",
        )
    actors_here = local.get("actor", {})
    heard, silent = progress.get("actors_heard"), progress.get("actors_silent")
    restarts = (progress.get("actor_lives") or 0) - (heard or 0)
    roles.add_row(
        "actors",
        str(actors_here.get("processes", "–")),
        figure(actors_here.get("cpu_cores"), 2) if actors_here else "–",
        _megabytes(actors_here.get("rss")),
        f"{figure(watch.actors_sent_per_s())} sent/s",
        f"{heard if heard is not None else '?'} heard, "
        + (f"[yellow]{silent} silent ≥ 10 s[/]" if silent else "none silent")
        + "".join(
            f", [red]{index} stuck in a step {age} s[/]"
            for index, age in (progress.get("actors_stuck") or {}).items()
        )
        + f", restarts {restarts}"
        + (
            f", [yellow]env faults {progress['env_faults']:,}[/]"
            if progress.get("env_faults")
            else ""
        ),
    )
    learning = Table.grid(padding=(0, 2))
    learning.add_column(style="bold cyan", justify="right")
    learning.add_column()
    learning.add_row(
        "return",
        f"{figure(progress.get('episode_return_mean'), 1)} (episodes, mean of the last 100)",
    )
    learning.add_row("evaluation", evaluation_text(watch).removeprefix("eval "))
    learning.add_row("curve", sparkline(list(watch.evaluations), top=watch.target) or "–")
    for label, name in (("policy lag", "policy_lag"), ("lag trained", "trained_lag")):
        if name == "policy_lag" or progress.get(f"{name}_median") is not None:  # IMPALA's
            learning.add_row(
                label,
                f"p50 {figure(progress.get(f'{name}_median'))}, p90 "
                f"{figure(progress.get(f'{name}_p90'))}, max "
                f"{figure(progress.get(f'{name}_max'))}",
            )
    learning.add_row(
        "replay",
        f"{fill_text(watch)} in all, "
        f"{figure(progress.get('transitions_per_s'))} {watch.items}/s in",
    )
    # Short here (the dashboard fills a screen); apex status says what would move it.
    learning.add_row("bound by", watch.binding(remedy=False) or "–")
    shard_count = len(progress.get("shards") or []) or watch.config.get("shards") or "?"
    faults = (
        f"shards alive {progress.get('shards_alive', '?')}/{shard_count}, learner restarts "
        f"{max(watch.learner_starts - 1, 0)}, actor restarts {restarts}, evaluator restarts "
        f"{progress.get('evaluator_restarts') or 0}"
        f"{' (given up)' if progress.get('evaluator') == 'given up' else ''}, stale priority "
        f"updates dropped {progress.get('dropped_stale_updates') or 0}, non-finite updates "
        f"skipped {progress.get('updates_skipped_nonfinite') or 0}, rejected messages "
        f"{sum(s.get('rejected_total') or 0 for s in shard_rows)}, refused connections "
        f"{sum((progress.get('refused') or {}).values())}"
    )
    return Group(
        head,
        roles,
        Panel(learning, title="learning", title_align="left"),
        Panel(faults, title="restarts and faults", title_align="left"),
    )


class KeyReader:
    """Single key presses from a terminal (cbreak mode, restored on exit); off a terminal
    it only waits."""

    def __enter__(self) -> KeyReader:
        self._fd, self._saved = None, None
        if sys.stdin.isatty():
            import termios
            import tty

            self._fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        return self

    def wait(self, timeout_s: float) -> str | None:
        """The key pressed within ``timeout_s``, or None."""
        if self._fd is None:
            threading.Event().wait(timeout_s)
            return None
        ready, _, _ = select.select([self._fd], [], [], timeout_s)
        return os.read(self._fd, 1).decode(errors="replace") if ready else None

    def __exit__(self, *_) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)


def run_top(run_dir: Path, interval_s: float, once: bool) -> None:
    """Draws the dashboard every ``interval_s`` until q or Ctrl-C (``once``: one frame,
    printed, for scripts and logs)."""
    from rich.console import Console
    from rich.live import Live

    watch, sampler, console = RunWatch(run_dir), ProcessSampler(run_dir), Console()
    watch.poll()
    local = sampler.sample()
    if once:  # CPU is a difference: a second sample a moment later
        threading.Event().wait(min(interval_s, 1.0))
        console.print(dashboard(watch, sampler.sample()))
        return
    with (
        contextlib.suppress(KeyboardInterrupt),
        KeyReader() as keys,
        Live(dashboard(watch, local), console=console, screen=True, auto_refresh=False) as live,
    ):
        while True:
            if keys.wait(interval_s) in ("q", "Q"):
                break
            watch.poll()
            live.update(dashboard(watch, sampler.sample()), refresh=True)
