"""``apex status``, ``apex plot`` and ``apex top``: reading a run, local or Slurm, from its
directory while it runs or after it ended."""

from __future__ import annotations

import json
from pathlib import Path

import click

from launch.options import RUN_DIR
from launch.run_files import CURVES_FILE


@click.command("status")
@click.argument("run_dir", type=RUN_DIR)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def status(run_dir: Path, as_json: bool) -> None:
    """Summarise a run: outcome, evaluations against the target, updates, time, restarts,
    faults and the newest checkpoint (`apex slurm status` adds Slurm's view)."""
    from launch.views.status import run_status, status_lines

    summary = run_status(run_dir)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    for line in status_lines(summary):
        click.echo(line)


@click.command("plot")
@click.argument("run_dirs", nargs=-1, required=True, type=RUN_DIR)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PNG to write [RUN_DIR/curves.png for one run, curves.png for several].",
)
def plot(run_dirs: tuple[Path, ...], out: Path | None) -> None:
    """Draw learning curves: evaluation and episode returns against training time, env
    steps and updates (with the target), updates/s, replay size and policy lag. Several
    runs are overlaid, one colour each."""
    from launch.views.curves import plot_runs

    if out is None:
        out = run_dirs[0] / CURVES_FILE if len(run_dirs) == 1 else Path(CURVES_FILE)
    click.echo(f"wrote {plot_runs(list(run_dirs), out)}")


@click.command("top")
@click.argument("run_dir", type=RUN_DIR)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=1.0,
    help="Seconds between redraws.",
)
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and logs).")
def top(run_dir: Path, interval: float, once: bool) -> None:
    """A live dashboard of a running run (local or Slurm): per-role rates and CPU, replay
    per shard, back-pressure, policy lag, restarts and faults, the evaluation curve.
    q or Ctrl-C quits."""
    from launch.views.top import run_top

    run_top(run_dir, interval, once)
