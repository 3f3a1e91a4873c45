"""The scaling benchmark's figures: a point's records, bootstrap intervals, times to a
confirmed solve and speedups, for the sweep's points and for its single-node baseline."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from bench.learning.learn_suite import return_at
from bench.learning.learning_stats import censored_iqm, iqm, stratified_bootstrap_ci
from bench.scaling.scaling_tasks import ScalingTask

SUITE = "scaling"
BOOTSTRAP_REPS = 2000


def figure(
    case: str, actors: int, metric: str, unit: str, values: list[float], params: dict, **more
) -> dict:
    return {
        "suite": SUITE,
        "case": case,
        "implementation": "apex",
        "status": "ok",
        "metric": metric,
        "unit": unit,
        "median": float(np.median(values)),
        "min": float(min(values)),
        "max": float(max(values)),
        "repeats": len(values),
        "params": {**params, "actors": actors, "values": values},
        **more,
    }


def interval(values: Sequence[float], higher_is_better: bool) -> dict:
    point, low, high = stratified_bootstrap_ci({"runs": values}, reps=BOOTSTRAP_REPS)
    return {"iqm": point, "ci_low": low, "ci_high": high, "higher_is_better": higher_is_better}


def solve_times(runs: Sequence[dict]) -> list[float]:
    """Each run's training seconds to its confirmed solve, an unsolved one at its budget."""
    return [r["solve_s"] if r["solved"] else r["budget_s"] for r in runs]


def speedup(base: Sequence[float], times: Sequence[float], seed: int = 0) -> dict:
    """``IQM(base) / IQM(times)`` with a 95% interval over resamples of both."""

    def ratio(scores) -> float:
        return iqm(scores["base"]) / iqm(scores["point"])

    point, low, high = stratified_bootstrap_ci(
        {"base": base, "point": times}, ratio, reps=BOOTSTRAP_REPS, seed=seed
    )
    return {"speedup": point, "ci_low": low, "ci_high": high}


def time_figure(
    task: ScalingTask, n: int, times: list[float], params: dict, censored: dict
) -> dict:
    """The record of a point's times to a confirmed solve (``censored``: their IQM with
    unsolved runs at the budget)."""
    return figure(
        task.name,
        n,
        "time_to_confirmed_solve",
        "s",
        times,
        params,
        unsolved=censored["unsolved"],
        lower_bound=censored["lower_bound"],
        **interval(times, False),
    )


def solve_figures(
    task: ScalingTask, n: int, mine: Sequence[dict], params: dict, times: list, censored: dict
) -> list[dict]:
    """A point's time and env steps to a confirmed solve and its returns at fixed times."""
    records = [time_figure(task, n, times, params, censored)]
    steps = [float(r["solve_env_steps"]) for r in mine if r["solved"]]
    if len(steps) == len(mine):
        records.append(
            figure(
                task.name,
                n,
                "env_steps_to_confirmed_solve",
                "env steps",
                steps,
                params,
                **interval(steps, False),
            )
        )
    for seconds in task.checkpoints_s:
        values = [v for v in (return_at(r, seconds) for r in mine) if v is not None]
        if len(values) == len(mine) and seconds <= task.budget_s:
            records.append(
                figure(
                    task.name,
                    n,
                    f"return_at_{seconds:g}s",
                    "return",
                    values,
                    params,
                    **interval(values, True),
                )
            )
    return records


def against_baseline(
    task: ScalingTask, runs: Sequence[dict], by_count: dict, points: list[dict]
) -> tuple[dict, list[dict], list[dict]]:
    """The single-node baseline's time to a confirmed solve (IQM with its interval, an
    unsolved run at its budget), and each point's speedup against it (also written into
    ``points`` as ``speedup_vs_baseline``): its point, records and ratios."""
    times = solve_times(runs)
    solved = [r["solved"] for r in runs]
    censored = censored_iqm(times, solved, task.budget_s)
    peer, copies = runs[0]["peer"], runs[0]["copies"]
    params = {
        "peer": peer,
        "copies": copies,
        "seeds": [r["seed"] for r in runs],
        "budget_s": task.budget_s,
        "cost_s": task.cost_s,
        "cost_kind": task.cost_kind,
    }
    record = time_figure(task, 0, times, params, censored)
    record["implementation"] = peer
    ratios = []
    for point in points:
        mine = by_count.get(point["actors"])
        if not mine or task.throughput_only:
            continue
        ratio = speedup(times, solve_times(mine))
        point["speedup_vs_baseline"] = {**ratio, "lower_bound": censored["lower_bound"]}
        ratios.append(
            {
                "suite": SUITE,
                "case": task.name,
                "metric": "time_to_confirmed_solve",
                "numerator": f"{peer}, {copies} env copies",
                "denominator": f"{point['actors']} actors",
                "ratio": ratio["speedup"],
                "ci_low": ratio["ci_low"],
                "ci_high": ratio["ci_high"],
            }
        )
    point = {
        "peer": peer,
        "copies": copies,
        "seeds": len(runs),
        "solved": sum(solved),
        "time_iqm": censored["iqm"],
        "time_lower_bound": censored["lower_bound"],
        "env_steps_per_s": statistics.median(r["env_steps"] / r["train_s"] for r in runs),
    }
    return point, [record], ratios
