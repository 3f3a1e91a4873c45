"""What ``apex train`` shows while it runs: on a terminal a status that redraws in place
(rich), elsewhere (CI, Slurm logs, a pipe) a plain line every few seconds.

Both show the same figures, rounded for a person: time, updates and their rate,
transitions per second, replay fill, the episode return, the last and best evaluation
against the target, policy lag, the time left before a limit stops the run, and what holds
it back (``launch.views.binding``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from launch.views.status import env_fault_text, env_name, evaluator_trouble
from launch.views.watch import RunWatch

PLAIN_INTERVAL_S = 5.0
LIVE_INTERVAL_S = 1.0


def figure(value: float | None, digits: int = 0) -> str:
    """``value`` rounded with thousands separators; "–" when unknown."""
    return "–" if value is None else f"{value:,.{digits}f}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def evaluation_text(watch: RunWatch) -> str:
    target = f"target {figure(watch.target, 1)}" if watch.target is not None else "no target"
    trouble = evaluator_trouble(watch.end or watch.progress or {})
    if watch.last_eval is None:
        return f"eval none{f': {trouble}' if trouble else ' yet'} / {target}"
    age = watch.last_eval_age_s()
    age = f", {duration(age)} ago" if age is not None and age >= 60 else ""
    text = f"eval {figure(watch.last_eval, 1)} (best {figure(watch.best_eval, 1)}{age}) / {target}"
    return f"{text} – {trouble}" if trouble else text


def fill_text(watch: RunWatch) -> str:
    size, capacity = watch.replay_fill()
    return f"{size:,}" + (f" ({100 * size / capacity:.0f}%)" if capacity else "")


def plain_line(watch: RunWatch, elapsed_s: float) -> str:
    """One progress line for logs."""
    head = f"[{elapsed_s:6.1f} s]"
    progress = watch.progress
    if not progress:
        return f"{head} {watch.filling()}"
    left = watch.time_left_s()
    return " | ".join(
        (
            f"{head} updates {progress['updates']:,} ({figure(progress['updates_per_s'])}/s)",
            f"{figure(progress.get('transitions_per_s'))} {watch.items}/s",
            f"replay {fill_text(watch)}",
            f"return {figure(progress.get('episode_return_mean'), 1)}",
            evaluation_text(watch),
            f"policy lag p50 {figure(progress.get('policy_lag_median'))}",
            *((faults,) if (faults := env_fault_text(progress)) else ()),
            *((f"left {duration(left)}",) if left is not None else ()),
            *((f"bound by {binding}",) if (binding := watch.binding()) else ()),
        )
    )


def status_table(watch: RunWatch, elapsed_s: float):
    """The redrawn status: a two-column grid of the same figures as :func:`plain_line`."""
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", justify="right")
    table.add_column()
    progress = watch.progress or {}
    env = env_name(watch.config)
    table.add_row("run", f"{watch.run_dir} ({env}) – {watch.state()}")
    table.add_row("elapsed", f"{duration(elapsed_s)} (training {duration(progress.get('time_s'))})")
    if progress:
        table.add_row("updates", f"{watch.updates():,} ({figure(progress['updates_per_s'])}/s)")
        table.add_row(f"{watch.items}/s", figure(progress.get("transitions_per_s")))
        table.add_row("replay", fill_text(watch))
        lag = (figure(progress.get("policy_lag_median")), figure(progress.get("policy_lag_p90")))
        table.add_row("policy lag", f"p50 {lag[0]}, p90 {lag[1]} versions")
        table.add_row(
            "return",
            f"{figure(progress.get('episode_return_mean'), 1)} (episodes, mean of the last 100)",
        )
    table.add_row("evaluation", evaluation_text(watch).removeprefix("eval "))
    if faults := env_fault_text(progress):
        table.add_row("env", faults)
    table.add_row("bound by", watch.binding() or "–")
    table.add_row("time left", duration(watch.time_left_s()))
    return table


class ProgressDisplay:
    """Feeds ``apex train``'s view from the run's metrics; :meth:`tick` is called often
    (the supervisor's watch loop), and draws when it is time to."""

    def __init__(self, run_dir: Path, live: bool, echo=print) -> None:
        self._watch = RunWatch(run_dir)
        self._echo = echo
        self._started = time.monotonic()
        self._next = self._started + (LIVE_INTERVAL_S if live else PLAIN_INTERVAL_S)
        self._live = None
        if live:
            from rich.live import Live

            # Lines the supervisor echoes meanwhile (restarts, the end) print above it.
            self._live = Live(
                status_table(self._watch, 0.0),
                refresh_per_second=4,
                transient=False,
                redirect_stdout=True,
            )
            self._live.start()

    def tick(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._watch.poll()
        elapsed = now - self._started
        if self._live is not None:
            self._live.update(status_table(self._watch, elapsed))
            self._next = now + LIVE_INTERVAL_S
        else:
            self._echo(plain_line(self._watch, elapsed))
            self._next = now + PLAIN_INTERVAL_S

    def close(self) -> None:
        """Draws the last status and leaves it on the screen (called once, at the end);
        plain lines end with the run's last figures, so a run shorter than one interval
        still logs them."""
        self._watch.poll()
        elapsed = time.monotonic() - self._started
        if self._live is None:
            if self._watch.progress:
                self._echo(plain_line(self._watch, elapsed))
            return
        self._live.update(status_table(self._watch, elapsed))
        self._live.stop()
        self._live = None


def supervisor_views(live: bool, curves: bool) -> dict:
    """A local supervisor's views as ``apex train`` and the API want them: its progress
    (redrawn in place when ``live``, else a line every few seconds) and, with
    ``curves``, ``curves.png`` drawn while the roles stop (``launch.local.supervisor``)."""
    from launch.views.curves import write_run_curves

    def display(run_dir: Path, echo: Callable[[str], None]) -> ProgressDisplay:
        return ProgressDisplay(run_dir, live, echo)

    return {"display": display, "while_stopping": write_run_curves if curves else None}
