"""``apex bench soak``: one long run under a schedule of faults (``bench.faults.soak_suite``),
with its checks and a plot of memory and intake over the run, the faults marked."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from bench.cli_options import progress, report_options, run_bench

# What the soak must show (issue 78's bar).
RSS_GROWTH_LIMIT = 0.05
# Past a rotation size: a metrics record, or what a role logs in the seconds between looks.
ROTATION_SLACK_BYTES = 64 * 1024


@click.command("soak")
@click.option(
    "--seconds",
    type=click.FloatRange(min=60),
    default=3600.0,
    show_default=True,
    help="Training seconds of the run.",
)
@click.option("--actors", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--kill-every",
    "kill_every_s",
    type=click.FloatRange(min=10),
    default=240.0,
    show_default=True,
    help="Seconds between kills of a random role.",
)
@click.option(
    "--sample-every",
    "sample_every_s",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds between samples of the processes.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the schedule.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the plot of RSS and intake here (PNG).",
)
@click.option(
    "--check",
    "record_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Run nothing: the checks (and --plot) of this soak record, its figures computed "
    "again from its samples by this commit's code.",
)
@report_options
def bench_soak(
    seconds,
    actors,
    kill_every_s,
    sample_every_s,
    seed,
    plot_path,
    record_path,
    json_path,
    markdown_path,
) -> None:
    """A run of SECONDS under faults (kill -9 of a random role every --kill-every, a shard
    stopped for 20 s, env copies that raise, return NaN and hang once); fails unless each
    check passes."""
    from bench.faults import soak_suite

    if record_path is not None:
        document = json.loads(record_path.read_text())
        config = document["suites"][soak_suite.SUITE]["config"]
        config["growth"] = soak_suite.growth_figures(config["samples"])
        click.echo(
            f"{record_path} (commit {document['git'].get('commit', '?')[:7]}), "
            f"per role: {json.dumps(config['growth'])}"
        )
        _report(config, plot_path)
        return
    outcomes = []

    def run_suite(memory_bytes: int | None) -> dict:
        with tempfile.TemporaryDirectory(prefix="apex-soak-") as root:
            result = soak_suite.run(
                seconds, actors, kill_every_s, sample_every_s, seed, Path(root), progress
            )
        outcomes.append(result["config"])
        return result

    run_bench(soak_suite.SUITE, run_suite, json_path, markdown_path)
    _report(outcomes[0], plot_path)


def _report(config: dict, plot_path: Path | None) -> None:
    """The plot, the checks and the account; fails on a failed check."""
    if plot_path:
        plot_soak(config, plot_path)
        click.echo(f"plot: {plot_path}")
    checks = soak_checks(config)
    for name, passed in checks.items():
        click.echo(f"{'pass' if passed else 'FAIL'}  {name}")
    click.echo(f"account: {config['account']}")
    if not all(checks.values()):
        raise click.ClickException("the soak failed a check (see above)")


def soak_checks(config: dict) -> dict[str, bool]:
    """The soak's bar: memory and open files flat, disk bounded, nothing unaccounted, the
    target reached, the run ended as asked."""
    growth = config["growth"]
    bounded = ("checkpoints", "replay")
    return {
        "the run ended by its time limit (exit code 0)": config["exit_code"] == 0,
        f"every role's RSS grew under {RSS_GROWTH_LIMIT:.0%} after warm-up": bool(growth)
        and all(g["rss_growth"] < RSS_GROWTH_LIMIT for g in growth.values()),
        "open files flat after warm-up (2 at most above their level then)": all(
            g.get("open_files_growth", g["open_files_spread"]) <= 2 for g in growth.values()
        ),
        "checkpoints and snapshots bounded (no growth over the second half)": all(
            config["disk"].get(part, {}).get("per_hour", 0)
            <= 0.1 * max(config["disk"].get(part, {}).get("bytes", 0), 1)
            for part in bounded
        ),
        "metrics and every log bounded by their rotation sizes": _rotation_held(config),
        "the hung env copy found by the watchdog (an actor's or the evaluator's)": (
            (config.get("actor_hangs") or 0) + (config.get("evaluator_hangs") or 0) >= 1
        ),
        "0 transitions unaccounted": config["account"]["unaccounted"] == 0,
        "the target reached (a confirmed solve)": config["target_reached"],
    }


def _rotation_held(config: dict) -> bool:
    """Through the run, the metrics (with their kept parts) within their bound, and each log
    within its own plus what a role writes between two looks of the supervisor."""
    rotation = config.get("rotation_mb")
    if rotation is None:
        return False  # a soak from before rotation
    parts = rotation["kept_parts"] + 1
    metrics_bound = parts * rotation["metrics"] * 2**20 + ROTATION_SLACK_BYTES
    log_bound = parts * rotation["log"] * 2**20 + ROTATION_SLACK_BYTES
    return all(
        s["disk"]["metrics"] <= metrics_bound and s["disk"]["largest_log"] <= log_bound
        for s in config["samples"]
    )


def plot_soak(config: dict, path: Path) -> Path:
    """RSS by role (summed over its processes) and the learner's intake over the run,
    each fault a vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = config["samples"]
    times = [s["time_s"] / 60 for s in samples]
    figure, (memory, intake) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    roles = sorted({p["role"] for s in samples for p in s["processes"].values()})
    for role in roles:
        memory.plot(
            times,
            [
                sum(p["rss_bytes"] for p in s["processes"].values() if p["role"] == role) / 2**20
                for s in samples
            ],
            label=role,
        )
    memory.set_ylabel("RSS (MiB, all processes of the role)")
    memory.legend(loc="upper left", fontsize=8)
    intake.plot(times, [s.get("transitions_per_s") or 0 for s in samples], color="#4878a8")
    intake.set_ylabel("transitions/s into the replay")
    intake.set_xlabel("minutes")
    colours = {
        "kill-actor": "#999999",
        "kill-shard": "#d08000",
        "kill-learner": "#c03030",
        "stop-shard": "#6040a0",
    }
    for fault in config["faults"]:
        for axis in (memory, intake):
            axis.axvline(
                fault["time_s"] / 60,
                color=colours.get(fault["fault"], "black"),
                linewidth=0.8,
                linestyle="--",
            )
    memory.set_title(
        f"soak: {config['actors']} actors, 2 shards, {config['seconds']:.0f} s; "
        "dashed: kill -9 (grey actor, orange shard, red learner), purple: "
        "a shard stopped",
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
