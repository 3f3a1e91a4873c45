"""Learning curves of one run or several overlaid: ``apex plot``, and ``curves.png`` that
``apex train`` and the Slurm learner leave in the run directory at the end.

Top row: the greedy evaluation mean (its min–max as a band) and the actors' episode
return (mean of the last 100) against training time, env steps and updates, with the
target as a dotted line. Bottom row: updates/s, replay size and policy lag against
training time. Env steps are the transitions the shards took in (one per env step);
an evaluation's env steps are read off the progress records at its time.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from launch.run_files import CURVES_FILE
from launch.views.status import RunRecords

logger = logging.getLogger(__name__)


def _series(records: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """``time_s`` and ``key`` of the records that have both."""
    pairs = [
        (r["time_s"], r[key])
        for r in records
        if r.get("time_s") is not None and r.get(key) is not None
    ]
    if not pairs:
        return np.empty(0), np.empty(0)
    times, values = zip(*pairs, strict=True)
    return np.asarray(times, dtype=float), np.asarray(values, dtype=float)


def _replay_size(record: dict) -> float | None:
    sizes = [s for s in record.get("replay_sizes") or [] if s is not None]
    return float(sum(sizes)) if sizes else None


def _label(run_dir: Path, run_dirs: list[Path]) -> str:
    """The shortest name that tells the runs apart: the directory's own name, unless two
    share it."""
    names = [d.name for d in run_dirs]
    return run_dir.name if names.count(run_dir.name) == 1 else str(run_dir)


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    """Draws the curves of ``run_dirs`` (one colour each) into ``out``; returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    figure, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    returns_axes, (rate_axis, replay_axis, lag_axis) = axes[0], axes[1]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    targets = set()
    for index, run_dir in enumerate(run_dirs):
        run = RunRecords.read(run_dir)
        colour, label = colours[index % len(colours)], _label(run_dir, run_dirs)
        if run.target_return is not None:
            targets.add(run.target_return)
        # Env steps at a time: from the progress records and the run's end, so that an
        # evaluation after the last progress record is not drawn at a stale count.
        progress_t, steps = _series(run.timeline, "transitions_added")
        eval_t, eval_mean = _series(run.evaluations, "eval_return_mean")
        _, eval_low = _series(run.evaluations, "eval_return_min")
        _, eval_high = _series(run.evaluations, "eval_return_max")
        eval_u = np.asarray(
            [e["updates"] for e in run.evaluations if e.get("eval_return_mean") is not None],
            dtype=float,
        )
        episode_t, episode_mean = _series(run.progress, "episode_return_mean")
        episode_u = np.asarray(
            [r["updates"] for r in run.progress if r.get("episode_return_mean") is not None],
            dtype=float,
        )
        if steps.size:  # env steps at a time: read off the progress records
            eval_steps = np.interp(eval_t, progress_t, steps)
            episode_steps = np.interp(episode_t, progress_t, steps)
        else:
            eval_steps = episode_steps = np.full(eval_t.size, np.nan)
        for axis, eval_x, episode_x in zip(
            returns_axes,
            (eval_t, eval_steps, eval_u),
            (episode_t, episode_steps, episode_u),
            strict=True,
        ):
            axis.plot(
                eval_x,
                eval_mean,
                marker="o",
                markersize=3,
                color=colour,
                label=f"{label}: evaluation",
            )
            if eval_low.size == eval_mean.size:
                axis.fill_between(eval_x, eval_low, eval_high, color=colour, alpha=0.12)
            if episode_x.size == episode_mean.size:
                axis.plot(
                    episode_x,
                    episode_mean,
                    color=colour,
                    linestyle="--",
                    linewidth=1,
                    alpha=0.8,
                    label=f"{label}: episodes (last 100)",
                )
        rate_axis.plot(*_series(run.progress, "updates_per_s"), color=colour, label=label)
        sizes = [
            (r["time_s"], _replay_size(r))
            for r in run.progress
            if r.get("time_s") is not None and _replay_size(r) is not None
        ]
        if sizes:
            replay_axis.plot(*zip(*sizes, strict=True), color=colour, label=label)
        lag_axis.plot(
            *_series(run.progress, "policy_lag_median"), color=colour, label=f"{label}: p50"
        )
        lag_axis.plot(
            *_series(run.progress, "policy_lag_p90"),
            color=colour,
            linestyle=":",
            label=f"{label}: p90",
        )
    for axis in returns_axes:
        _draw_targets(axis, sorted(targets))
    titles = ("return against training time", "return against env steps", "return against updates")
    for axis, title, xlabel in zip(
        returns_axes, titles, ("training time (s)", "env steps", "updates"), strict=True
    ):
        axis.set(title=title, xlabel=xlabel, ylabel="return")
    for axis in returns_axes[1:]:
        axis.xaxis.set_major_formatter(EngFormatter())  # 150k, not 150000
    replay_axis.yaxis.set_major_formatter(EngFormatter())
    rate_axis.set(title="learner updates/s", xlabel="training time (s)", ylabel="updates/s")
    replay_axis.set(
        title="replay size (all shards)", xlabel="training time (s)", ylabel="transitions"
    )
    lag_axis.set(
        title="policy lag of finished episodes",
        xlabel="training time (s)",
        ylabel="weight versions",
    )
    for axis in axes.flat:
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7, loc="best")
        else:
            axis.text(
                0.5,
                0.5,
                "no data yet",
                transform=axis.transAxes,
                ha="center",
                va="center",
                color="grey",
            )
    names = ", ".join(_label(d, run_dirs) for d in run_dirs)
    figure.suptitle(f"apex: {names}", fontsize=11)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out


def _draw_targets(axis, targets: list[float]) -> None:
    """A dotted line per target near the returns drawn; a target far off them (a run
    told never to stop at one, say 1e9) is named in the legend but not drawn, so that
    the curves keep their scale."""
    low, high = axis.get_ylim()
    span = max(high - low, 1.0)
    for target in targets:
        if low - span <= target <= high + span:
            axis.axhline(
                target, color="black", linestyle=":", linewidth=1, label=f"target {target:g}"
            )
        else:
            axis.plot([], [], " ", label=f"target {target:g} (off the chart)")


def write_run_curves(run_dir: Path) -> Path | None:
    """``curves.png`` in ``run_dir`` (None, and no file, for a run that recorded no
    progress or evaluation: an empty picture says nothing); a failure is logged, never
    raised: a picture must not turn a finished run into a failed one."""
    run = RunRecords.read(run_dir)
    if not run.progress and not run.evaluations:
        return None
    try:
        return plot_runs([run_dir], run_dir / CURVES_FILE)
    except Exception as exc:  # matplotlib raises many kinds; the run's outcome stands
        logger.warning("curves.png not drawn: %s", exc)
        return None
