"""The scaling record for a person: a table of the points and a plot of speedup against
actors with the ideal line and the intervals."""

from __future__ import annotations

from pathlib import Path


def _number(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _speedup(point: dict, base: int) -> str:
    figure = point.get(f"speedup_vs_{base}")
    if not figure:
        return "–"
    return (
        f"{figure['speedup']:.1f}× [{figure['ci_low']:.1f}, {figure['ci_high']:.1f}] "
        f"(eff. {figure['efficiency']:.2f})"
    )


def _baseline_lines(baseline: dict, points: list[dict], time: dict | None) -> str:
    """The single-node baseline's time and each point's speedup against it."""
    when = (
        f"{_number(time['iqm'])} s [{_number(time['ci_low'])}, {_number(time['ci_high'])}]"
        f"{' (lower bound)' if time.get('lower_bound') else ''}"
        if time
        else "–"
    )
    against = "; ".join(
        f"{p['actors']} actors "
        f"{p['speedup_vs_baseline']['speedup']:.1f}× [{p['speedup_vs_baseline']['ci_low']:.1f}, "
        f"{p['speedup_vs_baseline']['ci_high']:.1f}]"
        for p in points
        if p.get("speedup_vs_baseline")
    )
    return (
        f"Single-node baseline ({baseline['peer']}, {baseline['copies']} env copies in "
        f"processes): {baseline['solved']}/{baseline['seeds']} solved, {when} to a confirmed "
        f"solve (training seconds, evaluations left out); speedup against it: {against or '–'}."
    )


def markdown(document: dict) -> str:
    """The sweep's table: one row per actor count."""
    config = document["suites"]["scaling"]["config"]
    task, cores = config["task"], config["cores"]
    intervals = {
        r["params"]["actors"]: r
        for r in document["records"]
        if r["metric"] == "time_to_confirmed_solve"
    }
    lines = [
        f"## Scaling: {task['name']} ({task['env']}, every step and reset costs "
        f"{task['cost_s'] * 1000:g} ms as {task['cost_kind']}), {cores} cores, "
        f"git {document['git'].get('commit', '?')[:7]}"
        + (
            f"; weak scaling: the batch grows past {task['weak_from']} actors"
            if task.get("weak_from")
            else ""
        )
        + (
            f"; throughput only: every run trains {task['budget_s']:g} s"
            if task.get("throughput_only")
            else ""
        )
        + (
            "; each run a Slurm job across namespace hosts (learner, shard, actors)"
            if any(r.get("hosts") for r in config.get("runs", []))
            else ""
        ),
        "",
        "| actors | batch | solved | s to confirmed solve, IQM [95%] | speedup vs 1 | "
        f"vs one node ({cores}) | env steps/s (eff.) | updates/s | learner cores | "
        "inserts held | lag p50 | all actors heard, s | machine cores | bound by |",
        "|" + "---|" * 14,
    ]
    for point in config["points"]:
        n = point["actors"]
        time = intervals.get(n)
        when = (
            f"{_number(time['iqm'])} [{_number(time['ci_low'])}, {_number(time['ci_high'])}]"
            f"{' (lower bound)' if time.get('lower_bound') else ''}"
            if time
            else "–"
        )
        efficiency = point.get("step_efficiency")
        lines.append(
            f"| {n} | {point.get('batch_size') or '–'} | {point['solved']}/{point['seeds']} | "
            f"{when} | {_speedup(point, 1)} | "
            f"{_speedup(point, cores)} | {_number(point['env_steps_per_s'], 0)}"
            f"{f' ({efficiency:.2f})' if efficiency is not None else ''} | "
            f"{_number(point['updates_per_s'], 0)} | {_number(point['learner_cores'], 2)} | "
            f"{_number(point['inserts_held'], 2)} | {_number(point['policy_lag_p50'])} | "
            f"{_number(point.get('all_actors_heard_s'))} | "
            f"{_number(point['machine_busy_cores'], 2)} | {point['bound_by']} |"
        )
    baseline = config.get("baseline")
    if baseline:
        lines += ["", _baseline_lines(baseline, config["points"], intervals.get(0))]
    knee = config.get("knee")
    lines.append("")
    lines.append(
        f"Knee: {knee['actors']} actors, {knee['bound_by']}."
        if knee
        else "Knee: none within the points measured."
    )
    if config.get("failed"):
        lines.append(f"Failed runs: {config['failed']}")
    return "\n".join(lines) + "\n"


def plot(document: dict, directory: Path) -> Path:
    """Speedup against 1 actor, with the ideal line and each point's 95% interval, beside
    env steps/s against actors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = document["suites"]["scaling"]["config"]
    task = config["task"]
    points = config["points"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    counts = [p["actors"] for p in points]
    measured = [p for p in points if p.get("speedup_vs_1")]
    left.plot(counts, counts, "k--", linewidth=1, label="ideal")
    if measured:
        xs = [p["actors"] for p in measured]
        ys = [p["speedup_vs_1"]["speedup"] for p in measured]
        low = [y - p["speedup_vs_1"]["ci_low"] for y, p in zip(ys, measured, strict=True)]
        high = [p["speedup_vs_1"]["ci_high"] - y for y, p in zip(ys, measured, strict=True)]
        left.errorbar(
            [1, *xs],
            [1.0, *ys],
            yerr=[[0, *low], [0, *high]],
            marker="o",
            capsize=3,
            label="time to a confirmed solve",
        )
    left.set(
        xscale="log",
        yscale="log",
        xlabel="actors",
        ylabel="speedup against 1 actor",
        title="time to a confirmed solve (IQM, 95% interval)",
    )
    left.set_xscale("log", base=2)
    left.set_yscale("log", base=2)
    left.legend(fontsize=8)
    rates = [p["env_steps_per_s"] or 0.0 for p in points]
    right.plot(counts, rates, marker="o", label="measured")
    if rates and rates[0]:
        right.plot(
            counts, [rates[0] * n / counts[0] for n in counts], "k--", linewidth=1, label="ideal"
        )
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set(xlabel="actors", ylabel="env steps/s", title="throughput (median over seeds)")
    right.legend(fontsize=8)
    figure.suptitle(
        f"{task['name']}: {task['cost_s'] * 1000:g} ms a step as {task['cost_kind']}, "
        f"{config['cores']} cores"
    )
    figure.tight_layout()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"scaling-{task['name']}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
