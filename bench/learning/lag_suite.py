"""Lag suite (``apex bench lag``): IMPALA with actors held back, V-trace against no correction.

The claim IMPALA's V-trace makes: an actor-critic can learn from unrolls made by older
policies if each step's importance weight ``π(a|x) / μ(a|x)`` (truncated at ρ̄ and c̄)
corrects for the difference. Here actors load new weights only once they are at least
``K`` versions newer than those they hold (``actor.refresh_versions``), the learner
publishing a version after every update (``learner.publish_period = 1``), so the unrolls
the learner trains on lag up to ``K`` updates behind it. ``K = 0`` is the lock-step run
(``actor.lockstep``): each actor sends a round of unrolls and waits for the weights
trained on it, so the learner trains on its own policy. For each ``K`` the same runs are
made with V-trace and with the correction switched off (``impala.correction =
false``: ρ = c = 1, as if every unroll were on-policy).

Each run is a real ``apex train --set algorithm=impala`` on the env (CartPole-v1 by
default) until a confirmed solve (the run's evaluator: the target on its periodic
evaluation, then confirmed on 100 more episodes) or the budget. Per case: the training
seconds to the confirmed solve per seed (an unsolved run counts as the budget and is
counted in ``unsolved``), their IQM with its stratified-bootstrap 95% interval (a lower
bound where an unsolved run sits in the middle half), and the lag the learner measured on
what it trained on (the median over the run's progress records of their
``trained_lag_median``, in versions, so in updates). Beside the time, the updates to the
confirmed solve (an unsolved run at the updates it made) and the updates a second: in
lock-step the actors and the learner take turns, held back they run side by side, so on
a few cores the cases make different updates a second; a time to a solve mixes that
throughput in, the updates to it measure what the lag costs learning alone. Ratios: each
case's median time over the same correction's at the smallest K, where neither median is
an unsolved run's budget. The config's ``goal``: V-trace's IQM at K = 20 over its IQM
at the smallest K (the issue's bar, against lag 0: at most 1.10), and the same in
updates; each ratio with its bootstrap 95% interval, the bar met across the interval only
where the interval's top is under it.

The config keeps every run with its evaluations, so ``bench.learning.lag_report`` draws the return
curves of each K side by side (IQM with a 95% band, V-trace against no correction), and a
sitting stopped midway resumes from its record (``--resume``): the runs it holds are not
run again.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from apex.learning.metrics import read_metrics
from bench.learning.learning_stats import (
    censored_iqm,
    iqm,
    probability_of_improvement,
    stratified_bootstrap_ci,
)
from bench.machine import git_commit
from bench.report import ok_record
from bench.workers import REPO_ROOT, worker_env
from launch.run_files import read_config, read_summary
from launch.views.status import target_return

SUITE = "lag"
DEFAULT_LAGS = (0, 1, 5, 20, 50)
DEFAULT_SEEDS = tuple(range(10))
DEFAULT_BUDGET_S = 90.0
# What else makes lag, kept small so that K sets most of it: an actor polls for weights
# every 5 vector steps (the preset's 25); the queue holds 32 unrolls (4 batches of 8, where
# the default 1,024 alone lags 128 updates once the actors are ahead), learning from 8;
# an actor may have 4 messages of 8 unrolls in flight (the default 16). Measured at K = 1
# on CartPole (seed 100, a trial): about 9 versions of lag, solved in 18.6 s. Shorter
# (a queue of two messages, one in flight, weights every step) starved the learner: 9-21
# updates/s against about 100, and still 4-10 versions of lag (seed 100, trials). No
# unroll is replayed (a preset's replay_share, CartPole's since stop 55, would add the
# replayed unrolls' age to the lag K sets): every case learns from fresh unrolls only.
WEIGHT_REFRESH_STEPS = 5
QUEUE_SETTINGS = (
    "replay.capacity=32",
    "replay.min_size=8",
    "actor.insert_credit=4",
    f"actor.weight_refresh_steps={WEIGHT_REFRESH_STEPS}",
    "replay.replay_share=0",
)
# The bar: V-trace at a lag of about 20 versions within 10% of its time at lag 0.
GOAL_LAG, GOAL_SHARE = 20, 1.10


def lag_settings(lag: int) -> list[str]:
    """The settings that hold actors back ``lag`` versions (0: in lock-step)."""
    if lag == 0:
        return ["actor.lockstep=true", "actor.refresh_versions=1"]
    return [f"actor.refresh_versions={lag}"]


def run_once(env: str, lag: int, correction: bool, seed: int, budget_s: float, root: Path) -> dict:
    """One ``apex train`` run, as the record keeps it: its confirmed solve (training
    seconds; ``solve_s`` None: unsolved), its evaluations and confirmations as
    ``[training s, env steps, updates behind the weights, mean]`` (the learning suite's
    shape, so ``bench.learning.learn_suite.return_at`` reads its curve), the median of its
    progress records' trained-unroll lag, and the updates it made in its training
    seconds (``updates``, ``training_s``; at a solve, ``solve_updates``: those behind the
    solving weights, and ``solve_env_steps``)."""
    run_dir = root / f"{env.replace('/', '-')}-k{lag}-{'vtrace' if correction else 'off'}-{seed}"
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        "--env",
        env,
        "--seed",
        str(seed),
        "--max-time",
        str(budget_s),
        "--run-dir",
        str(run_dir),
        "--plain",
        "--no-curves",
        "--set",
        "algorithm=impala",
        "--set",
        "learner.publish_period=1",
        *(part for setting in lag_settings(lag) for part in ("--set", setting)),
        "--set",
        f"impala.correction={'true' if correction else 'false'}",
        *(part for setting in QUEUE_SETTINGS for part in ("--set", setting)),
    ]
    completed = subprocess.run(
        command,
        check=False,
        cwd=REPO_ROOT,
        env=worker_env(),
        capture_output=True,
        timeout=budget_s + 180,
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"apex train exited {completed.returncode}: {completed.stdout.decode()[-2000:]}"
        )
    records = read_metrics(run_dir)
    progress = [r for r in records if r.get("event") == "progress"]
    lags = [r["trained_lag_median"] for r in progress if r.get("trained_lag_median") is not None]

    def events(kind: str) -> list[list[float]]:
        return [
            [r["time_s"], r["env_steps"], r.get("weights_updates"), r["eval_return_mean"]]
            for r in records
            if r.get("event") == kind
        ]

    # The learner marks the confirmation that solves the run (the first at the target).
    solves = [r for r in records if r.get("event") == "confirmation" and r.get("solved")]
    solve = solves[0] if solves and solves[0]["time_s"] <= budget_s else None
    outcome = (read_summary(run_dir) or {}).get("outcome", {})
    return {
        "lag": lag,
        "correction": correction,
        "seed": seed,
        "budget_s": budget_s,
        "git": git_commit(REPO_ROOT),
        "solved": solve is not None,
        "solve_s": solve["time_s"] if solve else None,
        "solve_updates": solve.get("weights_updates") if solve else None,
        "solve_env_steps": solve["env_steps"] if solve else None,
        "updates": outcome.get("updates"),
        "training_s": outcome.get("train_seconds"),
        "evaluations": events("evaluation"),
        "confirmations": events("confirmation"),
        "target": target_return(read_config(run_dir)),
        "trained_lag": statistics.median(lags) if lags else None,
    }


def case_name(env: str, lag: int, correction: bool) -> str:
    return f"{env}-k{lag}-{'vtrace' if correction else 'no-correction'}"


def run(
    *,
    env: str = "CartPole-v1",
    lags: Sequence[int] = DEFAULT_LAGS,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    budget_s: float = DEFAULT_BUDGET_S,
    previous: Sequence[dict] = (),
    on_run: Callable[[list[dict]], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Every case's runs not in ``previous`` (runs of an earlier sitting of the same env
    and budget, kept and not run again), ``on_run`` told the runs after each one; then
    the records, ratios and goal over them all."""
    runs = list(previous)
    done = {(r["lag"], r["correction"], r["seed"]) for r in runs}
    with tempfile.TemporaryDirectory(prefix="apex-lag-") as scratch:
        for lag in lags:
            for correction in (True, False):
                for seed in seeds:
                    if (lag, correction, seed) in done:
                        continue
                    if progress:
                        progress(f"lag {case_name(env, lag, correction)} seed {seed}")
                    runs.append(run_once(env, lag, correction, seed, budget_s, Path(scratch)))
                    if on_run:
                        on_run(runs)
    return summarize(env, lags, seeds, budget_s, runs)


def summarize(
    env: str, lags: Sequence[int], seeds: Sequence[int], budget_s: float, runs: list[dict]
) -> dict[str, object]:
    """Per case: the times to a confirmed solve (an unsolved run at the budget) with their
    IQM and interval, and the lag trained on; the ratios of medians to the least K; the
    goal; the runs themselves (their curves) in the config."""
    records, ratios = [], []
    medians: dict[tuple[int, bool], float] = {}
    scores: dict[tuple[int, bool], list[float]] = {}
    update_scores: dict[tuple[int, bool], tuple[list[float], list[bool]]] = {}
    for lag in lags:
        for correction in (True, False):
            case = case_name(env, lag, correction)
            mine = sorted(
                (
                    r
                    for r in runs
                    if r["lag"] == lag and r["correction"] == correction and r["seed"] in seeds
                ),
                key=lambda r: r["seed"],
            )
            if not mine:
                continue
            times = [r["solve_s"] if r["solved"] else budget_s for r in mine]
            measured = [r["trained_lag"] for r in mine if r["trained_lag"] is not None]
            settings = ["learner.publish_period=1", *QUEUE_SETTINGS, *lag_settings(lag)]
            params = {
                "env": env,
                "refresh_versions": max(lag, 1),
                "lockstep": lag == 0,
                "correction": correction,
                "seeds": [r["seed"] for r in mine],
                "budget_s": budget_s,
                "settings": settings,
            }
            record = ok_record(SUITE, case, "apex", "time_to_solve", "s", times, params)
            record["unsolved"] = sum(not r["solved"] for r in mine)
            record["per_seed"] = times
            record.update(_interval(times, budget_s))
            records.append(record)
            scores[(lag, correction)] = times
            if measured:
                records.append(
                    ok_record(SUITE, case, "apex", "trained_lag", "versions", measured, params)
                )
            counted = _updates_records(case, mine, params)
            records += counted
            if counted:
                update_scores[(lag, correction)] = (
                    counted[0]["per_seed"],
                    [r["solved"] for r in mine],
                )
            medians[(lag, correction)] = record["median"]
    base = min(lag for lag, _ in medians) if medians else min(lags)
    for (lag, correction), median in medians.items():
        # A median at the budget is a censored time: no ratio is made from it.
        fresh = medians.get((base, correction))
        if lag != base and fresh is not None and max(median, fresh) < budget_s:
            ratios.append(
                {
                    "suite": SUITE,
                    "case": case_name(env, lag, correction),
                    "metric": "time_to_solve",
                    "numerator": f"k{lag}",
                    "denominator": f"k{base}",
                    "ratio": float(median / fresh),
                }
            )
    config = {
        "env": env,
        "lags": list(lags),
        "seeds": list(seeds),
        "budget_s": budget_s,
        "goal": _goal(scores, update_scores, base, budget_s),
        "runs": runs,
    }
    return {"records": records, "ratios": ratios, "config": config}


def _updates_records(case: str, runs: list[dict], params: dict) -> list[dict]:
    """A case's updates to a confirmed solve (an unsolved run at the updates it made: a
    lower bound) with their IQM and interval, and its updates per training second (see
    the module's note on throughput). None for runs recorded before these counts."""
    if any(
        r.get("updates") is None or (r["solved"] and r.get("solve_updates") is None) for r in runs
    ):
        return []
    counts = [r["solve_updates"] if r["solved"] else r["updates"] for r in runs]
    solved = [r["solved"] for r in runs]
    record = ok_record(SUITE, case, "apex", "updates_to_solve", "updates", counts, params)
    record["per_seed"] = counts
    record.update(_interval(counts, 0.0, solved))
    rates = [r["updates"] / r["training_s"] for r in runs if r.get("training_s")]
    rate = [ok_record(SUITE, case, "apex", "updates_per_s", "updates/s", rates, params)]
    return [record, *(rate if rates else [])]


def _interval(times: list[float], budget_s: float, solved: list[bool] | None = None) -> dict:
    """The IQM of a case's times to a confirmed solve (an unsolved run at the budget) and
    its stratified-bootstrap 95% interval (``bench.learning.learning_stats``); ``solved`` where
    the values are not times (an unsolved run then counts at its own value)."""
    flags = solved if solved is not None else [t < budget_s for t in times]
    censored = censored_iqm(times, flags, budget_s)
    _, low, high = stratified_bootstrap_ci({"case": times})
    return {
        "iqm": censored["iqm"],
        "iqm_ci95": [low, high],
        "iqm_lower_bound": censored["lower_bound"],
    }


def _goal(
    scores: dict[tuple[int, bool], list[float]],
    update_scores: dict[tuple[int, bool], tuple[list[float], list[bool]]],
    base: int,
    budget_s: float,
) -> dict:
    """The issue's bar, where the runs hold both cases: V-trace's IQM at K = GOAL_LAG over
    its IQM at the smallest K, at most GOAL_SHARE; with P(the lagged run solves sooner).
    The same in updates to the solve where the runs count them (``updates``)."""
    lagged, fresh = scores.get((GOAL_LAG, True)), scores.get((base, True))
    if lagged is None or fresh is None or base == GOAL_LAG:
        return {"checked": False}
    # The IQMs alone (their intervals are the records'; the ratio's is made below).
    lagged_iqm = censored_iqm(lagged, [t < budget_s for t in lagged], budget_s)
    ratio = lagged_iqm["iqm"] / iqm(fresh)
    # An unsolved lagged run in the middle half makes the ratio a lower bound: not met.
    met = ratio <= GOAL_SHARE and not lagged_iqm["lower_bound"]
    goal = {
        "checked": True,
        "lag_k": GOAL_LAG,
        "base_k": base,
        "iqm_ratio": ratio,
        "met": met,
        **_ratio_interval(lagged, fresh, met),
        "p_lagged_sooner": probability_of_improvement(
            {"t": lagged}, {"t": fresh}, higher_is_better=False
        ),
    }
    counted, counted_fresh = update_scores.get((GOAL_LAG, True)), update_scores.get((base, True))
    fresh_iqm = censored_iqm(*counted_fresh, 0.0) if counted_fresh else None
    # A lag-0 count that is a lower bound bounds the ratio from above only: none is made.
    if counted and fresh_iqm and not fresh_iqm["lower_bound"]:
        lagged_iqm = censored_iqm(*counted, 0.0)
        ratio = lagged_iqm["iqm"] / fresh_iqm["iqm"]
        # An unsolved lagged run's count is a lower bound: so is the ratio.
        met = ratio <= GOAL_SHARE and not lagged_iqm["lower_bound"]
        goal["updates"] = {
            "iqm_ratio": ratio,
            "met": met,
            **_ratio_interval(counted[0], counted_fresh[0], met),
            "lower_bound": lagged_iqm["lower_bound"],
            "p_lagged_fewer": probability_of_improvement(
                {"u": counted[0]}, {"u": counted_fresh[0]}, higher_is_better=False
            ),
        }
    return goal


def _ratio_interval(lagged: list[float], fresh: list[float], met: bool) -> dict:
    """``ratio_ci95``: the 95% interval of ``IQM(lagged) / IQM(fresh)``, each resample
    drawing both cases' seeds anew, each from its own (their runs are independent); and
    ``met_across_interval``: the goal ``met`` and the interval's top at most
    ``GOAL_SHARE``. Ten seeds of a bimodal task (CartPole solves in about 5 s or about
    15 s) left a point ratio that moved from 1.85 to 0.74 between two sittings: the
    interval says how far to trust one."""
    _, low, high = stratified_bootstrap_ci(
        {"lagged": lagged, "fresh": fresh},
        statistic=lambda scores: iqm(scores["lagged"]) / iqm(scores["fresh"]),
    )
    return {"ratio_ci95": [low, high], "met_across_interval": met and high <= GOAL_SHARE}
