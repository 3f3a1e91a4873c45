"""The Python API: a run from a script or a notebook, checked and run as ``apex train`` runs
one (the same preflight, supervisor, run directory and summary)::

    from launch.api import train

    summary = train("examples/grid_world.toml", overrides={"learner": {"max_time_s": 60}})
    summary = train({"env": "CartPole-v1"}, run_dir="runs/mine")
    print(summary["solved"], summary["seconds"], summary["run_dir"])

The run's processes are this process's children; Ctrl-C (SIGINT) or SIGTERM stops them
as it stops ``apex train``, and the handlers before the run are put back after it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import click


class RunRefused(ValueError):
    """A run that ``apex train`` would refuse (exit code 2): the message says why, a line
    per problem; nothing was started and no run directory made."""


def train(
    config: str | Path | Mapping | None = None,
    *,
    overrides: Mapping | None = None,
    run_dir: str | Path | None = None,
    echo: Callable[[str], None] = print,
    curves: bool = False,
) -> dict:
    """Trains a run on this machine and returns its summary.

    Args:
        config: a run config file (TOML or JSON), or its values as a mapping (the file's
            layout, ``launch.config``); None: the defaults (CartPole-v1).
        overrides: values over it, as ``apex train --set`` gives them
            (``{"learner": {"max_time_s": 60}}``).
        run_dir: where the run writes (default ``runs/ENV-YYYYmmdd-HHMMSS``).
        echo: where the progress lines and the end line go.
        curves: draw ``curves.png`` at the end.

    Returns:
        The run's ``summary.json`` (its outcome: ``solved``, ``reason``, ``seconds``,
        ``exit_code``, restarts, the learner's counters in ``outcome``) with ``run_dir``.

    Raises:
        RunRefused: what the preflight found (a bad setting, an env that cannot be made,
            a replay that does not fit this machine).
    """
    from launch.local.supervisor import Supervisor
    from launch.options import load_checked_run_config, new_run_dir
    from launch.overrides import merge_overrides
    from launch.run_files import read_summary
    from launch.run_keys import with_run_keys
    from launch.views.live_view import supervisor_views

    path, values = (None, dict(config)) if isinstance(config, Mapping) else (config, {})
    try:
        checked = load_checked_run_config(
            None if path is None else Path(path), merge_overrides(values, overrides or {})
        )
    except click.UsageError as exc:
        raise RunRefused(exc.message) from None
    directory = Path(run_dir) if run_dir is not None else new_run_dir(checked.env)
    checked = with_run_keys(checked, directory)
    views = supervisor_views(live=False, curves=curves)
    supervisor = Supervisor(checked, directory, False, echo, **views)
    restore = _stop_on_signals(supervisor.stop)
    try:
        summary = supervisor.run()
    finally:
        restore()
    echo(summary.line())
    return {**(read_summary(directory) or {}), "run_dir": str(directory)}


def _stop_on_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """SIGINT and SIGTERM call ``stop`` (where this is the main thread: only it may set
    handlers); returns what puts the handlers before back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    from launch.supervision.signals import on_stop_signal

    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    on_stop_signal(stop)

    def restore() -> None:
        for number, handler in before.items():
            signal.signal(number, handler)

    return restore
