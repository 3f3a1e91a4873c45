"""Arms of one environment side by side, from learning records made apart: R2D2 against
RecurrentPPO and DQN on stacks, or any algorithm's task against another's. Each record
holds one task's sides (``apex bench learn``); an arm is one side of one record, named by
the task's algorithm prefix (``r2d2/...`` gives ``r2d2``) or by the peer's name.

The first arm is the reference: it is compared with every other at each figure both have
(returns at the checkpoints, times to a confirmed solve), with the same statistics as the
learning suite's own comparison (``bench.learning.learn_suite.comparisons``).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from bench.learning.learn_suite import SUITE, intervals_apart
from bench.learning.learning_stats import probability_of_improvement

ARMS_SUITE = "arms"


class ArmsError(ValueError):
    """Records that cannot be read, or arms that cannot be compared."""


@dataclass(frozen=True)
class Arm:
    label: str
    source: str
    git: dict
    task: dict
    figures: dict[str, dict]  # metric -> the learning record (IQM, interval, values)
    runs: list[dict] | None  # None where the record was summarised (no curves)


def read_record(path: Path) -> dict:
    """A benchmark document from ``path`` (``.json``, or ``.json.gz`` as a summarised
    record's whole keeps beside it)."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as stream:
                return json.load(stream)
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, EOFError, ValueError) as exc:
        raise ArmsError(f"{path}: not a readable JSON record ({exc})") from exc


def _algorithm_and_subject(task: dict) -> tuple[str, str]:
    """A task's algorithm prefix and what it is of: ``r2d2/MinAtar/Breakout-no-trail``
    gives ``r2d2`` and ``MinAtar/Breakout-no-trail``; a task without a prefix is apex's
    default algorithm on its env."""
    name = task.get("name")
    if name and "/" in name:
        algorithm, rest = name.split("/", 1)
        return algorithm, rest
    return "apex", task["env"]


def subject(task: dict) -> str:
    """What an arm's task is of, past its algorithm."""
    return _algorithm_and_subject(task)[1]


def arms_of(document: dict, source: str) -> list[Arm]:
    """One arm per side of a learning record, in the record's order."""
    try:
        config = document["suites"][SUITE]["config"]
        task, runs = config["task"], config["runs"]
        records = [r for r in document["records"] if r["suite"] == SUITE]
    except (KeyError, TypeError) as exc:
        raise ArmsError(f"{source}: not a learning record (no {exc})") from exc
    algorithm = _algorithm_and_subject(task)[0]
    arms = []
    for implementation in dict.fromkeys(r["implementation"] for r in records):
        mine = [r for r in records if r["implementation"] == implementation]
        figures = {r["metric"]: r for r in mine if r["status"] == "ok" and "iqm" in r}
        side_runs = [
            r for r in runs if r.get("implementation") == implementation and "error" not in r
        ]
        curves = all(isinstance(r.get("evaluations"), list) for r in side_runs)
        label = algorithm if implementation == "apex" else implementation
        arms.append(
            Arm(
                label, source, document.get("git", {}), task, figures, side_runs if curves else None
            )
        )
    return arms


def gather(documents: list[tuple[str, dict]]) -> list[Arm]:
    """Every arm of the records, checked to be of one environment with distinct names."""
    arms = [arm for source, document in documents for arm in arms_of(document, source)]
    if len(arms) < 2:
        raise ArmsError(f"{len(arms)} arm(s) in the records: a comparison needs two")
    env = {(a.task["env"], json.dumps(a.task.get("env_kwargs"), sort_keys=True)) for a in arms}
    if len(env) > 1:
        which = ", ".join(f"{a.label} ({a.task['env']}, {a.source})" for a in arms)
        raise ArmsError(f"the arms are of different environments: {which}")
    labels = [a.label for a in arms]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ArmsError(
            f"more than one arm named {', '.join(twice)}: give each arm's "
            "sittings as one record (apex bench learn --resume)"
        )
    return arms


def compare(reference: Arm, other: Arm) -> list[dict]:
    """``reference`` against ``other`` at every figure both have: the IQMs' difference
    (positive: the reference better), their ratio where both are positive (reference over
    other for returns, other over reference for times: above 1, the reference better),
    P(a reference run does better) and whether the 95% intervals are apart."""
    found = []
    for metric, mine in reference.figures.items():
        theirs = other.figures.get(metric)
        if theirs is None:
            continue
        higher = bool(mine["higher_is_better"])
        sign = 1.0 if higher else -1.0
        apart = intervals_apart(mine, theirs)
        difference = sign * (mine["iqm"] - theirs["iqm"])
        numerator, denominator = (mine, theirs) if higher else (theirs, mine)
        comparison = {
            "suite": ARMS_SUITE,
            "metric": metric,
            "unit": mine["unit"],
            "reference": reference.label,
            "other": other.label,
            "difference": difference,
            "probability_of_improvement": probability_of_improvement(
                {metric: mine["params"]["values"]},
                {metric: theirs["params"]["values"]},
                higher_is_better=higher,
            ),
            "intervals_overlap": not apart,
            "reference_ahead": apart and difference > 0,
            "bound": bool(mine.get("lower_bound") or theirs.get("lower_bound")),
        }
        if numerator["iqm"] > 0 and denominator["iqm"] > 0:
            comparison["ratio"] = numerator["iqm"] / denominator["iqm"]
        found.append(comparison)
    return found


def result(arms: list[Arm]) -> dict:
    """The arms' figures as records (suite ``arms``, implementation the arm's name) and
    the reference's comparison with each other arm."""
    records = [
        {**figure, "suite": ARMS_SUITE, "implementation": arm.label}
        for arm in arms
        for figure in arm.figures.values()
    ]
    comparisons = [c for other in arms[1:] for c in compare(arms[0], other)]
    config = {
        "subject": subject(arms[0].task),
        "env": arms[0].task["env"],
        "env_kwargs": arms[0].task.get("env_kwargs"),
        "arms": [
            {
                "label": a.label,
                "source": a.source,
                "git": a.git,
                "task": a.task.get("name") or a.task["env"],
            }
            for a in arms
        ],
    }
    return {"records": records, "comparisons": comparisons, "config": config}


def _metric_order(metric: str) -> tuple[int, float]:
    if metric.startswith("return_at_"):
        return (1, float(metric.removeprefix("return_at_").removesuffix("s")))
    return (0, 0.0)


def markdown(outcome: dict) -> str:
    """A table of IQM [95%] per figure and arm, the comparisons under it, the sources."""
    config, records = outcome["config"], outcome["records"]
    labels = [a["label"] for a in config["arms"]]
    cell = {(r["implementation"], r["metric"]): r for r in records}
    metrics = sorted(dict.fromkeys(r["metric"] for r in records), key=_metric_order)
    lines = [
        f"### arms: {config['subject']}",
        "",
        "| figure | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for metric in metrics:
        row = []
        for label in labels:
            r = cell.get((label, metric))
            row.append(
                "—" if r is None else f"{r['iqm']:.3g} [{r['ci_low']:.3g}, {r['ci_high']:.3g}]"
            )
        lines.append(f"| {metric} | " + " | ".join(row) + " |")
    lines.append("")
    for c in outcome["comparisons"]:
        verdict = (
            "apart, the reference ahead"
            if c["reference_ahead"]
            else "apart, behind"
            if not c["intervals_overlap"]
            else "overlapping"
        )
        ratio = f", ratio {c['ratio']:.2f}×" if "ratio" in c else ""
        bound = " (an unsolved run in the middle half: bounds only)" if c["bound"] else ""
        lines.append(
            f"- {c['reference']} against {c['other']}, {c['metric']}: difference "
            f"{c['difference']:+.3g}{ratio}; P({c['reference']} better) "
            f"{c['probability_of_improvement']:.2f}; intervals {verdict}"
            f"{bound}"
        )
    lines += [
        "",
        "Sources: "
        + "; ".join(
            f"{a['label']} from {a['source']} @ {str(a['git'].get('commit', '?'))[:7]}"
            + (" (dirty tree)" if a["git"].get("dirty") else "")
            for a in config["arms"]
        ),
    ]
    return "\n".join(lines) + "\n"


def plot(arms: list[Arm], path: Path) -> Path:
    """One figure: each arm's IQM return against wall-clock time with its 95% band.

    Raises:
        ArmsError: an arm whose record was summarised (its curves dropped).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.learning.learn_report import draw_return_bands

    summarised = [f"{a.label} ({a.source})" for a in arms if a.runs is None]
    if summarised:
        raise ArmsError(
            "no curves in a summarised record: give its whole record (the "
            f".full.json.gz beside it) for {', '.join(summarised)}"
        )
    budget = max(float(a.task["budget_s"]) for a in arms)
    figure, axis = plt.subplots(figsize=(7, 4.5))
    draw_return_bands(axis, {a.label: a.runs for a in arms}, budget)
    axis.set(
        xlabel="seconds since spawn",
        ylabel="greedy return (IQM, 95% band)",
        title=f"{subject(arms[0].task)}: arms against wall-clock time",
    )
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="best")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
