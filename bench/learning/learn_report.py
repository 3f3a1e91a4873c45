"""The learning suite's own table and plot: IQMs with their 95% intervals, the comparison
between the sides, each run's seed, and the curves with interval bands."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.learning.learn_suite import SUITE, return_at
from bench.learning.learning_stats import stratified_bootstrap_ci

CURVE_POINTS = 40


def _figure(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.1f}"
    if unit == "fraction":
        return f"{value:.3f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def markdown(document: dict) -> str:
    """IQM [95% interval] per metric and side, the comparisons, and the runs."""
    lines = []
    records = [r for r in document["records"] if r["suite"] == SUITE]
    for case in dict.fromkeys(r["case"] for r in records):
        chosen = [r for r in records if r["case"] == case]
        sides = list(dict.fromkeys(r["implementation"] for r in chosen))
        lines += [
            f"### learn: {case}",
            "",
            "| metric | " + " | ".join(sides) + " |",
            "|---|" + "---|" * len(sides),
        ]
        for metric in dict.fromkeys(r["metric"] for r in chosen if r["status"] == "ok"):
            cells = []
            for side in sides:
                found = [
                    r for r in chosen if r["implementation"] == side and r.get("metric") == metric
                ]
                cells.append(_cell(found[0]) if found else "—")
            lines.append(f"| {metric} | " + " | ".join(cells) + " |")
        for record in chosen:
            if record["status"] != "ok":
                lines.append(f"\n{record['implementation']}: unavailable ({record['reason']})")
        for ratio in (r for r in document["ratios"] if r["suite"] == SUITE and r["case"] == case):
            overlap = "overlap" if ratio["intervals_overlap"] else "do not overlap"
            solve = ratio["metric"] == "time_to_confirmed_solve"
            what = "time to a confirmed solve" if solve else ratio["metric"].replace("_", " ")
            better = "solves sooner" if solve else "returns more"
            bound = "≥ " if ratio.get("ratio_lower_bound") else ""
            lines += [
                "",
                f"{ratio['numerator']}/{ratio['denominator']} IQM {what}: "
                f"**{bound}{ratio['ratio']:.2f}×**; P(apex {better}) "
                f"{bound if ratio['probability_of_improvement'] < 1 else ''}"
                f"{ratio['probability_of_improvement']:.2f}; the 95% intervals "
                f"{overlap}.",
            ]
            if bound:
                lines.append(
                    f"({ratio['numerator']}'s unsolved runs count at the budget, "
                    "so these are lower bounds.)"
                )
        lines.append("")
    return "\n".join(lines) + "\n"


def _cell(record: dict) -> str:
    unit = record["unit"]
    if "iqm" not in record:  # per seed, no interval (stays solved)
        return (
            f"median {_figure(record['median'], unit)} (min {_figure(record['min'], unit)}"
            f", {record['repeats']} seeds)"
        )
    text = (
        f"{_figure(record['iqm'], unit)} [{_figure(record['ci_low'], unit)}, "
        f"{_figure(record['ci_high'], unit)}]"
    )
    if record.get("unsolved"):
        bound = "≥ " if record.get("lower_bound") else ""
        text = f"{bound}{text}, {record['unsolved']} of {record['repeats']} unsolved"
    return text


def draw_return_bands(axis, runs_by_label: dict[str, list[dict]], budget_s: float) -> None:
    """One line per label on ``axis``: the IQM over its runs of the return at each of
    ``CURVE_POINTS`` times up to ``budget_s`` (``return_at``), with its 95% band; drawn
    from the first time every run has a return."""
    grid = np.linspace(budget_s / CURVE_POINTS, budget_s, CURVE_POINTS)
    for label, runs in runs_by_label.items():
        points = []
        for seconds in grid:
            values = [return_at(r, seconds) for r in runs]
            if runs and all(v is not None for v in values):
                points.append((seconds, *stratified_bootstrap_ci({"t": values}, reps=500)))
        if points:
            t, iqm, low, high = (np.array(column) for column in zip(*points, strict=True))
            (line,) = axis.plot(t, iqm, label=f"{label} ({len(runs)} seeds)")
            axis.fill_between(t, low, high, alpha=0.2, color=line.get_color())


def plot(document: dict, directory: Path) -> list[Path]:
    """Per task: the IQM return against wall-clock time with its 95% band, one line per
    side, and the target. Returns the PNGs written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    config = document["suites"][SUITE]["config"]
    task, runs = config["task"], [r for r in config["runs"] if "error" not in r]
    figure, axis = plt.subplots(figsize=(7, 4.5))
    sides = dict.fromkeys(r["implementation"] for r in runs)
    draw_return_bands(
        axis,
        {side: [r for r in runs if r["implementation"] == side] for side in sides},
        task["budget_s"],
    )
    name = task.get("name") or task["env"]  # the task's case (older records: its env)
    if task["target"] is not None:
        axis.axhline(task["target"], color="#888888", linestyle="--", linewidth=1, label="target")
    axis.set(
        xlabel="seconds since spawn",
        ylabel="greedy return (IQM, 95% band)",
        title=f"{name}: learning against wall-clock time",
    )
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="lower right")
    path = directory / f"learn-{name.replace('/', '-')}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]
