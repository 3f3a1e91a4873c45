"""Learning suite: how fast apex learns, against its peer in the same sitting, with the
statistics of Agarwal et al. (2021) over explicit seeds (``bench.learning.learning_stats``).

Each run (``bench.learning.learn_runs``) is one seed of one side, timed from its spawn, under the
same rule on both sides: an evaluation every ``eval_every_steps`` env steps, a confirmation
on ``confirm_episodes`` more episodes when one reaches the target, and only a confirmed
solve stops the clock. Per task and side the suite reports, each as its interquartile
mean (IQM) with a stratified-bootstrap 95% interval:

- wall-clock seconds, env steps and updates to a confirmed solve (an unsolved run counts
  at the budget, or at its last evaluation's steps and updates, and makes the figure a
  lower bound when it falls in the middle half);
- the return at fixed wall-clock checkpoints: the newest evaluation heard by then (after
  a confirmed solve that ended the run, the confirmation's mean);
- with ``keep_training``, how many of the evaluations after the first confirmed solve
  stay at the target ("stays solved"), per seed.

and, between the sides, the ratio of IQM times and the probability that an apex run
solves sooner than a peer's. A run is kept in the record as it finished, so a long task is
filled across sittings: runs already in a record given to resume from are not run again.

Before a side's first timed run, one untimed run of it warms what a first run would pay
alone: numba's kernels compiled into its cache and Python's bytecode written (in a fresh
checkout apex's first run started 1.2-1.5 s later than the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from bench.learning.learn_runs import run_apex, run_peer
from bench.learning.learn_tasks import Task
from bench.learning.learning_stats import (
    censored_iqm,
    probability_of_improvement,
    stratified_bootstrap_ci,
)

SUITE = "learn"
SOLVE_METRICS = (  # metric, unit, the run's field, the fallback of an unsolved run
    ("time_to_confirmed_solve", "s", "solve_s"),
    ("env_steps_to_confirmed_solve", "env steps", "solve_env_steps"),
    ("updates_to_confirmed_solve", "updates", "solve_updates"),
)
BOOTSTRAP_REPS = 2000
# The untimed warm-up run's budget: long enough to reach training (and its kernels).
WARM_UP_S = 8.0


def _unsolved_score(run: dict, field: str) -> float:
    """What an unsolved run scores: its budget, or its last evaluation's steps/updates
    (a lower bound either way)."""
    if field == "solve_s":
        return run["budget_s"]
    column = 1 if field == "solve_env_steps" else 2
    values = [e[column] for e in run["evaluations"] if e[column] is not None]
    return float(values[-1]) if values else 0.0


def return_at(run: dict, seconds: float) -> float | None:
    """The run's return at ``seconds``: its newest evaluation by then; after a confirmed
    solve that ended it, the confirmation's mean; None before its first evaluation."""
    if run["solved"] and run["solve_s"] <= seconds and run.get("stopped_at_solve", True):
        return next(c[3] for c in run["confirmations"] if c[0] == run["solve_s"])
    heard = [e[3] for e in run["evaluations"] if e[0] <= seconds]
    return heard[-1] if heard else None


def stays_solved(run: dict, target: float) -> float | None:
    """The share of periodic evaluations after the first confirmed solve at or above
    ``target`` (None: never solved, or no evaluation after it)."""
    if not run["solved"]:
        return None
    after = [e[3] for e in run["evaluations"] if e[0] > run["solve_s"]]
    return float(np.mean(np.asarray(after) >= target)) if after else None


def _interval(values: Sequence[float], case: str, higher_is_better: bool) -> dict:
    point, low, high = stratified_bootstrap_ci({case: values}, reps=BOOTSTRAP_REPS)
    return {"iqm": point, "ci_low": low, "ci_high": high, "higher_is_better": higher_is_better}


def intervals_apart(a: dict, b: dict) -> bool:
    """Whether two figures' 95% intervals do not overlap."""
    return a["ci_high"] < b["ci_low"] or b["ci_high"] < a["ci_low"]


def _record(
    case: str,
    implementation: str,
    metric: str,
    unit: str,
    values: list[float],
    params: dict,
    **figures,
) -> dict:
    return {
        "suite": SUITE,
        "case": case,
        "implementation": implementation,
        "status": "ok",
        "metric": metric,
        "unit": unit,
        "median": float(np.median(values)),
        "min": float(min(values)),
        "max": float(max(values)),
        "repeats": len(values),
        "params": {**params, "values": values},
        **figures,
    }


def side_records(task: Task, implementation: str, runs: list[dict]) -> list[dict]:
    """Every figure of one side on one task (runs that failed are listed, not scored)."""
    case = task.case
    failed = [r for r in runs if "error" in r]
    runs = [r for r in runs if "error" not in r]
    params = {
        "seeds": [r["seed"] for r in runs],
        "budget_s": task.budget_s,
        "failed": [{"seed": r["seed"], "error": r["error"]} for r in failed],
    }
    if not runs:
        reason = failed[0]["error"] if failed else "no runs"
        return [
            {
                "suite": SUITE,
                "case": case,
                "implementation": implementation,
                "status": "unavailable",
                "reason": reason,
                "params": params,
            }
        ]
    records = []
    if task.target is not None:
        solved = [r["solved"] for r in runs]
        for metric, unit, field in SOLVE_METRICS:
            values = [
                float(r[field])
                if r["solved"] and r[field] is not None
                else _unsolved_score(r, field)
                for r in runs
            ]
            budget = task.budget_s if field == "solve_s" else 0.0
            censored = censored_iqm(values, solved, budget=budget)
            records.append(
                _record(
                    case,
                    implementation,
                    metric,
                    unit,
                    values,
                    params,
                    unsolved=censored["unsolved"],
                    lower_bound=censored["lower_bound"],
                    **_interval(values, case, higher_is_better=False),
                )
            )
        per_seed = {
            str(r["seed"]): stays_solved(r, task.target)
            for r in runs
            if not r.get("stopped_at_solve", True)
        }
        fractions = [f for f in per_seed.values() if f is not None]
        if fractions:
            records.append(
                _record(
                    case,
                    implementation,
                    "stays_solved",
                    "fraction",
                    fractions,
                    {**params, "per_seed": per_seed},
                )
            )
    for seconds in task.checkpoints_s:
        values = [v for v in (return_at(r, seconds) for r in runs) if v is not None]
        if len(values) == len(runs) and seconds <= task.budget_s:
            records.append(
                _record(
                    case,
                    implementation,
                    f"return_at_{seconds:g}s",
                    "return",
                    values,
                    params,
                    **_interval(values, case, True),
                )
            )
    return records


def comparisons(task: Task, records: list[dict]) -> list[dict]:
    """apex against its peer: with a target, on time to a confirmed solve (the ratio of
    IQMs peer/apex, above 1: apex faster); without one, on the return at the last
    checkpoint (apex/peer, above 1: apex ahead; meaningful where returns are positive, as
    the tasks without a target have). Each with P(an apex run does better) and whether
    the 95% intervals overlap.

    An unsolved run counts at the budget, below its true time. Where that makes the
    peer's IQM a lower bound and apex's is not, the ratio, P and the gap between the
    intervals are all lower bounds too, and the ratio is marked ``ratio_lower_bound``;
    where apex's IQM is a lower bound the ratio could only be bounded from above, and
    none is made."""
    solving = task.target is not None
    metric = "time_to_confirmed_solve" if solving else f"return_at_{task.checkpoints_s[-1]:g}s"
    figures = {
        r["implementation"]: r for r in records if r["status"] == "ok" and r["metric"] == metric
    }
    if {"apex", task.peer} - figures.keys():
        return []
    apex, peer = figures["apex"], figures[task.peer]
    if apex.get("lower_bound") or (peer.get("lower_bound") and not solving):
        return []
    apex_values, peer_values = ({task.case: r["params"]["values"]} for r in (apex, peer))
    numerator, denominator = (peer, apex) if solving else (apex, peer)
    if denominator["iqm"] <= 0:
        return []
    return [
        {
            "suite": SUITE,
            "case": task.case,
            "metric": metric,
            "numerator": numerator["implementation"],
            "denominator": denominator["implementation"],
            "ratio": numerator["iqm"] / denominator["iqm"],
            "probability_of_improvement": probability_of_improvement(
                apex_values, peer_values, higher_is_better=not solving
            ),
            "intervals_overlap": not intervals_apart(apex, peer),
            "ratio_lower_bound": bool(peer.get("lower_bound")),
        }
    ]


def run(
    task: Task,
    *,
    seeds: Sequence[int],
    implementations: Sequence[str] = ("apex", "peer"),
    previous: Sequence[dict] = (),
    keep_training: bool = False,
    apex_settings: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    on_run: Callable[[list[dict]], None] | None = None,
    warm_up: bool = True,
) -> dict[str, object]:
    """Runs every seed of every side not already in ``previous`` (runs from a record, on
    this task), then scores them all. ``apex_settings`` go to apex's runs as ``--set``;
    ``on_run`` gets every run so far after each one (to save the record as it fills);
    ``warm_up``: an untimed run of each side first (off for a plumbing check)."""
    runners = {
        "apex": lambda task, seed, keep: run_apex(task, seed, keep, tuple(apex_settings)),
        "peer": run_peer,
    }
    names = {"apex": "apex", "peer": task.peer}
    runs = [r for r in previous if "error" not in r]
    done = {(r["implementation"], r["seed"]) for r in runs}
    for side in implementations:
        to_run = [seed for seed in seeds if (names[side], seed) not in done]
        if to_run and warm_up:
            if progress:
                progress(f"learn {task.case} {names[side]} warm-up (untimed)")
            warm = replace(task, budget_s=WARM_UP_S, target=None, checkpoints_s=())
            runners[side](warm, to_run[0], False)
        for seed in to_run:
            if progress:
                progress(f"learn {task.case} {names[side]} seed {seed}")
            outcome = runners[side](task, seed, keep_training)
            outcome["stopped_at_solve"] = not keep_training
            runs.append(outcome)
            if on_run:
                on_run(runs)
    by_side = {
        name: [r for r in runs if r["implementation"] == name]
        for name in dict.fromkeys(r["implementation"] for r in runs)
    }
    records = [
        record for name, side in by_side.items() for record in side_records(task, name, side)
    ]
    ratios = comparisons(task, records)
    config = {
        "task": vars(task) | {"seeds": list(task.seeds)},
        "seeds": list(seeds),
        "keep_training": keep_training,
        "apex_settings": list(apex_settings),
        "warm_up_s": WARM_UP_S if warm_up else 0.0,
        "runs": runs,
    }
    return {"records": records, "ratios": ratios, "config": config}
