"""The lag suite's own table and plot: per K, V-trace beside no correction, in time to a
confirmed solve and in greedy return over the budget, and the return curves side by side."""

from __future__ import annotations

from pathlib import Path

from bench.learning.lag_suite import GOAL_SHARE, SUITE, case_name
from bench.learning.learn_report import draw_return_bands
from bench.learning.learn_suite import return_at
from bench.learning.learning_stats import stratified_bootstrap_ci

# The times, as shares of the budget, at which the table gives each case's return.
RETURN_SHARES = (1 / 9, 2 / 9, 1 / 3, 2 / 3, 1.0)


def _case_runs(config: dict, lag: int, correction: bool) -> list[dict]:
    return [
        r
        for r in config["runs"]
        if r["lag"] == lag and r["correction"] == correction and r["seed"] in config["seeds"]
    ]


def _k(lag: int) -> str:
    return "0 (lock-step)" if lag == 0 else str(lag)


def _correction(correction: bool) -> str:
    return "V-trace" if correction else "off"


def markdown(document: dict) -> str:
    """Time to a confirmed solve and return at fixed times per case, the goal, per seed."""
    config = document["suites"][SUITE]["config"]
    env, budget = config["env"], config["budget_s"]
    records = {(r["case"], r["metric"]): r for r in document["records"] if r["suite"] == SUITE}
    lines = [
        f"### lag: {env}, {len(config['seeds'])} seeds, {budget:g} s of training",
        "",
        "| K | correction | lag trained on | time to confirmed solve, IQM [95%] | "
        "unsolved | updates to it, IQM [95%] | updates/s |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = [
        (lag, correction)
        for lag in config["lags"]
        for correction in (True, False)
        if _case_runs(config, lag, correction)
    ]
    for lag, correction in cases:
        case = case_name(env, lag, correction)
        solve, lagged = records.get((case, "time_to_solve")), records.get((case, "trained_lag"))
        low, high = solve["iqm_ci95"]
        bound = "≥ " if solve["iqm_lower_bound"] else ""
        measured = f"{lagged['median']:.0f}" if lagged else "—"
        lines.append(
            f"| {_k(lag)} | {_correction(correction)} | {measured} | "
            f"{bound}{solve['iqm']:.1f} s [{low:.1f}, {high:.1f}] | "
            f"{solve['unsolved']} of {solve['repeats']} | "
            f"{_updates_cells(records, case)} |"
        )
    times = [share * budget for share in RETURN_SHARES]
    lines += [
        "",
        "Greedy return, IQM [95%] over the seeds (after a confirmed solve that "
        "ended a run: its confirmation's mean):",
        "",
        "| K | correction | " + " | ".join(f"at {t:.0f} s" for t in times) + " |",
        "|---|---|" + "---|" * len(times),
    ]
    for lag, correction in cases:
        runs = _case_runs(config, lag, correction)
        cells = []
        for seconds in times:
            values = [return_at(r, seconds) for r in runs]
            if any(v is None for v in values):
                cells.append("—")  # a run had no evaluation yet
                continue
            point, low, high = stratified_bootstrap_ci({"t": values}, reps=1000)
            cells.append(f"{point:.0f} [{low:.0f}, {high:.0f}]")
        lines.append(f"| {_k(lag)} | {_correction(correction)} | " + " | ".join(cells) + " |")
    goal = config["goal"]
    if goal.get("checked"):
        lines += [
            "",
            f"Goal: V-trace's IQM time at K = {goal['lag_k']} over K = "
            f"{goal['base_k']}: **{goal['iqm_ratio']:.2f}×**{_ratio_ci(goal)} (at most "
            f"{GOAL_SHARE:.2f} asked: {_verdict(goal)}); P(lagged solves sooner) "
            f"{goal['p_lagged_sooner']:.2f}.",
        ]
        if "updates" in goal:
            counted = goal["updates"]
            bound = "≥ " if counted["lower_bound"] else ""
            lines[-1] += (
                f" In updates to the solve: **{bound}{counted['iqm_ratio']:.2f}×**"
                f"{_ratio_ci(counted)} ({_verdict(counted)}); P(lagged solves in "
                f"fewer) {counted['p_lagged_fewer']:.2f}."
            )
    lines += ["", "Seconds to a confirmed solve per seed (— unsolved):", ""]
    for lag, correction in cases:
        runs = sorted(_case_runs(config, lag, correction), key=lambda r: r["seed"])
        seeds = ", ".join(
            f"{r['seed']}: {r['solve_s']:.1f}" if r["solved"] else f"{r['seed']}: —" for r in runs
        )
        lines.append(f"- K = {_k(lag)}, {_correction(correction)}: {seeds}")
    return "\n".join(lines) + "\n"


def _ratio_ci(goal: dict) -> str:
    """`` [low, high]``: the ratio's 95% interval (empty for records made before it)."""
    if "ratio_ci95" not in goal:
        return ""
    low, high = goal["ratio_ci95"]
    return f" [{low:.2f}, {high:.2f}]"


def _verdict(goal: dict) -> str:
    """Met or not on the point ratio, and whether the whole interval is under the bar
    (records made before the interval say only met or not)."""
    if not goal["met"]:
        return "not met"
    if goal.get("met_across_interval"):
        return "met, across the whole interval"
    return "met on the IQM, not across its interval" if "ratio_ci95" in goal else "met"


def _updates_cells(records: dict, case: str) -> str:
    """A case's updates to a confirmed solve and its median updates a second (— where
    its runs were recorded before these counts)."""
    counted, rate = records.get((case, "updates_to_solve")), records.get((case, "updates_per_s"))
    if counted is None:
        return "— | —"
    low, high = counted["iqm_ci95"]
    bound = "≥ " if counted["iqm_lower_bound"] else ""
    speed = f"{rate['median']:.0f}" if rate else "—"
    return f"{bound}{counted['iqm']:.0f} [{low:.0f}, {high:.0f}] | {speed}"


def plot(document: dict, directory: Path) -> list[Path]:
    """One panel per K: V-trace's and the uncorrected runs' IQM return against training
    seconds with 95% bands, and the target. Returns the PNG written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = document["suites"][SUITE]["config"]
    lags = [lag for lag in config["lags"] if any(_case_runs(config, lag, c) for c in (True, False))]
    if not lags:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(
        1, len(lags), figsize=(3.6 * len(lags), 3.8), sharey=True, squeeze=False
    )
    targets = {r["target"] for r in config["runs"] if r.get("target") is not None}
    for axis, lag in zip(axes[0], lags, strict=True):
        cases = {_correction(c): _case_runs(config, lag, c) for c in (True, False)}
        draw_return_bands(axis, cases, config["budget_s"])
        for target in targets:
            axis.axhline(target, color="#888888", linestyle="--", linewidth=1)
        axis.set(title=f"K = {_k(lag)}", xlabel="training seconds")
        axis.legend(loc="lower right", fontsize=7)
    axes[0][0].set_ylabel("greedy return (IQM, 95% band)")
    figure.suptitle(f"{config['env']}: V-trace against no correction, actors K versions behind")
    path = directory / f"lag-{config['env'].replace('/', '-')}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]
