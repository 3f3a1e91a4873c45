"""Scaling suite: how much sooner a task is solved with N actors than with one, where that
stops, and what stops it (``apex bench scaling``).

Each point is one actor count; each run one seed at that count (``bench.scaling.scaling_runs``),
every run with the same settings. Per point the suite reports, over the seeds:

- the learner's training seconds and env steps to a confirmed solve, as interquartile means
  with stratified-bootstrap 95% intervals (an unsolved run counts at the budget and makes
  the figure a lower bound when it falls in the middle half), and the greedy return at fixed
  training times;
- the **speedup** against 1 actor, ``IQM(T_1) / IQM(T_N)``, with a bootstrap interval that
  resamples both points' runs, and its **efficiency** ``speedup / N``; the same against one
  node's worth of actors (as many as this machine has cores);
- throughput: env steps/s and its efficiency ``rate_N / (N · rate_1)``, updates/s, the
  learner's and shards' CPU, how often the rate limiter held the actors or the learner
  waited for data, the policy lag, and the machine's busy cores;
- what **binds** the point (:func:`bound_by`), and the **knee**: the first point whose
  time efficiency falls below 0.6 or whose env-step efficiency falls below 0.8.

Runs at small actor counts may run side by side (``parallel_up_to``): on a task whose step
cost is a sleep their actors use little of the machine, and the record keeps each run's
busy cores so the claim can be checked. A run is kept as it finishes, so a sweep is filled
across sittings: runs already in a record given to resume from are not run again.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from bench.learning.learning_stats import censored_iqm
from bench.scaling.baseline import PEER, run_baseline
from bench.scaling.scaling_figures import (
    SUITE,
    against_baseline,
    figure,
    solve_figures,
    solve_times,
    speedup,
)
from bench.scaling.scaling_runs import run_point
from bench.scaling.scaling_tasks import ScalingTask
from launch.views.binding import what_binds

WARM_UP_S = 8.0
# The knee: the first point below either efficiency.
KNEE_TIME_EFFICIENCY = 0.6
KNEE_STEP_EFFICIENCY = 0.8
THROUGHPUT_FIGURES = (  # the run's throughput key, metric, unit
    ("env_steps_per_s", "env_steps_per_s", "steps/s"),
    ("updates_per_s", "updates_per_s", "updates/s"),
    ("learner_cores", "learner_cores", "cores"),
    ("shard_cores", "shard_cores", "cores"),
    ("inserts_held", "inserts_held_share", "fraction"),
    ("samples_waited", "samples_waited_share", "fraction"),
    ("policy_lag_p50", "policy_lag_p50", "versions"),
    ("first_update_s", "first_update_s", "s"),
    ("all_actors_heard_s", "all_actors_heard_s", "s"),
)


def bound_by(figures: dict, cores: int) -> str:
    """What holds a point back, from its median figures (``launch.views.binding``'s rule)."""
    binding = what_binds(
        inserts_held=figures.get("inserts_held") or 0.0,
        samples_waited=figures.get("samples_waited") or 0.0,
        shard_cores=[figures.get("shard_cores") or 0.0],
        machine_busy_cores=figures.get("machine_busy_cores"),
        cores=cores,
    )
    return binding.line() if binding else "none clearly (neither side waited most of the time)"


def _medians(runs: Sequence[dict]) -> dict:
    out = {}
    for key, _, _ in THROUGHPUT_FIGURES:
        values = [
            r["throughput"][key] for r in runs if r.get("throughput", {}).get(key) is not None
        ]
        out[key] = statistics.median(values) if values else None
    busy = [r["machine_busy_cores"] for r in runs if r.get("machine_busy_cores") is not None]
    out["machine_busy_cores"] = statistics.median(busy) if busy else None
    return out


def score(task: ScalingTask, runs: Sequence[dict], cores: int) -> dict:
    """Records, speedups and the knee of every point that has runs, and the single-node
    baseline's point where it has runs (those that name a ``peer``)."""
    baseline_runs = [r for r in runs if r.get("peer") and "error" not in r]
    runs = [r for r in runs if not r.get("peer") or "error" in r]
    ok = [r for r in runs if "error" not in r]
    counts = sorted({r["actors"] for r in ok})
    by_count = {n: [r for r in ok if r["actors"] == n] for n in counts}
    failed = [
        {"actors": r.get("actors", r.get("peer")), "seed": r["seed"], "error": r["error"]}
        for r in runs
        if "error" in r
    ]
    records, points = [], []
    for n, mine in by_count.items():
        params = {
            "seeds": [r["seed"] for r in mine],
            "budget_s": task.budget_s,
            "cost_s": task.cost_s,
            "cost_kind": task.cost_kind,
        }
        times = solve_times(mine)
        solved = [r["solved"] for r in mine]
        censored = censored_iqm(times, solved, task.budget_s)
        if not task.throughput_only:
            records += solve_figures(task, n, mine, params, times, censored)
        for key, metric, unit in THROUGHPUT_FIGURES:
            values = [
                r["throughput"][key] for r in mine if r.get("throughput", {}).get(key) is not None
            ]
            if values:
                records.append(figure(task.name, n, metric, unit, values, params))
        medians = _medians(mine)
        points.append(
            {
                "actors": n,
                "batch_size": mine[0].get("batch_size"),
                "seeds": len(mine),
                "solved": sum(solved),
                "time_iqm": censored["iqm"],
                "time_lower_bound": censored["lower_bound"],
                **medians,
                "bound_by": bound_by(medians, cores),
            }
        )
    ratios = _speedups(task, by_count, points, cores, solves=not task.throughput_only)
    baseline = None
    if baseline_runs:
        baseline, more_records, more_ratios = against_baseline(
            task, baseline_runs, by_count, points
        )
        records += more_records
        ratios += more_ratios
    return {
        "records": records,
        "ratios": ratios,
        "points": points,
        "knee": knee(points),
        "baseline": baseline,
        "failed": failed,
    }


def _speedups(
    task: ScalingTask, by_count: dict, points: list[dict], cores: int, solves: bool = True
) -> list[dict]:
    """Each point's env-step efficiency and (with ``solves``) its speedup against 1 actor
    and against one node's worth (``cores`` actors); written into ``points`` too."""
    ratios = []
    base_rate = next((p["env_steps_per_s"] for p in points if p["actors"] == 1), None)
    for point in points:
        n = point["actors"]
        if base_rate and point["env_steps_per_s"]:
            point["step_efficiency"] = point["env_steps_per_s"] / (n * base_rate)
        for base in sorted({1, cores}) if solves else ():
            if base not in by_count or n <= base:
                continue
            ratio = speedup(solve_times(by_count[base]), solve_times(by_count[n]))
            efficiency = ratio["speedup"] / (n / base)
            lower = bool(point["time_lower_bound"])  # an unsolved run in the middle half
            label = "1 actor" if base == 1 else f"one node ({base} actors)"
            point[f"speedup_vs_{base}"] = {**ratio, "efficiency": efficiency}
            ratios.append(
                {
                    "suite": SUITE,
                    "case": task.name,
                    "metric": "time_to_confirmed_solve",
                    "numerator": label,
                    "denominator": f"{n} actors",
                    "ratio": ratio["speedup"],
                    "ci_low": ratio["ci_low"],
                    "ci_high": ratio["ci_high"],
                    "efficiency": efficiency,
                    "upper_bound_only": lower,
                }
            )
    return ratios


def knee(points: Sequence[dict]) -> dict | None:
    """The first point past which adding actors stops paying: its time efficiency against
    1 actor below ``KNEE_TIME_EFFICIENCY`` or its env-step efficiency below
    ``KNEE_STEP_EFFICIENCY``; with what binds it. None: no such point measured."""
    for point in points:
        time_efficiency = (point.get("speedup_vs_1") or {}).get("efficiency")
        step_efficiency = point.get("step_efficiency")
        low_time = time_efficiency is not None and time_efficiency < KNEE_TIME_EFFICIENCY
        low_steps = step_efficiency is not None and step_efficiency < KNEE_STEP_EFFICIENCY
        if low_time or low_steps:
            return {
                "actors": point["actors"],
                "time_efficiency": time_efficiency,
                "step_efficiency": step_efficiency,
                "bound_by": point["bound_by"],
            }
    return None


def _reusable(task: ScalingTask, run: dict) -> bool:
    """Whether a previous run counts in this sweep: it ran the settings this sweep runs at
    its count (a weak sweep takes a strong sweep's runs up to the count its batch starts
    growing from), to a solve or for throughput as this sweep does (for as long); a
    baseline's run, to a solve within the same budget."""
    if "error" in run:
        return False
    if run.get("peer"):
        return not task.throughput_only and run["budget_s"] == task.budget_s
    batch = run.get("batch_size", task.batch_size(run["actors"]))
    return (
        batch == task.batch_size(run["actors"])
        and bool(run.get("throughput_only")) == task.throughput_only
        and (not task.throughput_only or run["budget_s"] == task.budget_s)
    )


def run(
    task: ScalingTask,
    *,
    counts: Sequence[int],
    seeds: Sequence[int],
    parallel_up_to: int = 0,
    previous: Sequence[dict] = (),
    progress: Callable[[str], None] | None = None,
    on_run: Callable[[list[dict]], None] | None = None,
    warm_up: bool = True,
    cores: int | None = None,
    runner: Callable[[ScalingTask, int, int, int], dict] = run_point,
    baseline_seeds: Sequence[int] = (),
    baseline_runner: Callable[[ScalingTask, int, int], dict] = run_baseline,
) -> dict[str, object]:
    """Runs every (count, seed) not already in ``previous``, fewest actors first, then
    scores them all. A point of at most ``parallel_up_to`` actors runs its seeds side by
    side; ``on_run`` gets every run so far after each one (to save the record as it fills);
    ``runner(task, actors, seed, cores)`` makes one run (``scaling_runs.run_point``)."""
    cores = cores or os.cpu_count() or 1
    runs = [r for r in previous if _reusable(task, r)]
    done = {(r["actors"], r["seed"]) for r in runs if not r.get("peer")}
    if warm_up and any((n, s) not in done for n in counts for s in seeds):
        if progress:
            progress(f"scaling {task.name}: warm-up (untimed)")
        runner(replace(task, budget_s=WARM_UP_S), 1, seeds[0], cores)
    for n in sorted(counts):
        to_run = [seed for seed in seeds if (n, seed) not in done]
        if not to_run:
            continue
        side_by_side = len(to_run) if n <= parallel_up_to else 1
        if progress:
            progress(
                f"scaling {task.name}: {n} actors, seeds {to_run}"
                f"{f', {side_by_side} side by side' if side_by_side > 1 else ''}"
            )
        with ThreadPoolExecutor(max_workers=side_by_side) as pool:
            for outcome in pool.map(lambda seed, n=n: runner(task, n, seed, cores), to_run):
                outcome["side_by_side"] = side_by_side
                runs.append(outcome)
                if on_run:
                    on_run(runs)
    done_baseline = {r["seed"] for r in runs if r.get("peer")}
    for seed in (s for s in baseline_seeds if s not in done_baseline):
        if progress:
            progress(f"scaling {task.name}: the single-node baseline ({PEER}), seed {seed}")
        runs.append(baseline_runner(task, seed, cores))
        if on_run:
            on_run(runs)
    scored = score(task, runs, cores)
    config = {
        "task": vars(task),
        "counts": list(counts),
        "seeds": list(seeds),
        "parallel_up_to": parallel_up_to,
        "cores": cores,
        "warm_up_s": WARM_UP_S if warm_up else 0.0,
        "points": scored["points"],
        "knee": scored["knee"],
        "baseline": scored["baseline"],
        "failed": scored["failed"],
        "runs": runs,
    }
    return {"records": scored["records"], "ratios": scored["ratios"], "config": config}
