"""``apex bench`` commands that measure a whole system: real runs (``system``), faults
under a run (``faults``), synthetic fleets (``fleet``) and the cost model checked against
them (``model``)."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli_options import LAYOUT, progress, report_options, run_bench
from bench.faults.fault_names import FAULTS
from bench.workers import REPO_ROOT


@click.command("faults")
@click.option("--quick", is_flag=True, help="5 s stops and full disks instead of 30 s.")
@click.option("--fault", "faults", multiple=True, type=click.Choice(FAULTS), help="[all]")
@click.option("--slurm", is_flag=True, help="Jobs on 3 namespace hosts under a real Slurm (root).")
@report_options
def bench_faults(quick, faults, slurm, json_path, markdown_path) -> None:
    """Kill, stop, corrupt and fill under a real run: recovery time and what was lost."""
    from bench.faults import faults_suite, slurm_faults

    def run_suite(memory_bytes: int | None) -> dict:
        if slurm:
            return slurm_faults.run(quick, faults or None, progress)
        return faults_suite.run(quick, faults or None, progress)

    run_bench(faults_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("fleet")
@click.option("--quick", is_flag=True, help="Fleets of 16 and 64, 12 s windows.")
@click.option(
    "--env",
    "env_name",
    type=click.Choice(["CartPole-v1", "Pong"]),
    default="CartPole-v1",
    help="Whose recorded transitions it sends.",
)
@click.option(
    "--actors",
    "fleet_sizes",
    multiple=True,
    type=click.IntRange(min=1),
    help="Fleet sizes [64 256 1024 2048].",
)
@click.option("--shards", type=click.IntRange(min=1), default=4, help="Replay shards.")
@click.option("--seconds", type=click.FloatRange(min=1), default=None, help="Window [40].")
@click.option("--hosts", is_flag=True, help="Shards, learner, fleet on 3 namespace hosts (root).")
@report_options
def bench_fleet(
    quick, env_name, fleet_sizes, shards, seconds, hosts, json_path, markdown_path
) -> None:
    """Logical actors replaying recorded transitions at the Ape-X paper's rate: the largest
    fleet S shards and a real learner sustain."""
    from bench.system import fleet_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return fleet_suite.run(quick, env_name, fleet_sizes, shards, seconds, progress, hosts)

    run_bench(fleet_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("model")
@click.option(
    "--env",
    "envs",
    multiple=True,
    type=click.Choice(["CartPole-v1", "Pong"]),
    help="Envs whose unit costs to measure [both].",
)
@click.option("--seconds", type=click.FloatRange(min=0.5), default=3.0, help="Per unit cost.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, help="Median of this many.")
@click.option(
    "--measured",
    multiple=True,
    help="bench system/fleet JSON [bench/results/].",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option(
    "--learner-rate",
    "learner_rates",
    multiple=True,
    type=click.FloatRange(min=0.1),
    help="Learner updates/s to plan for [19: the Ape-X paper's GPU].",
)
@click.option(
    "--plot",
    "plot_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write model-checks.png and model-plan.png here.",
)
@click.option(
    "--scaling",
    "scaling_records",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="apex bench scaling records whose points the scaling model predicts [none].",
)
@click.option(
    "--scaling-seconds",
    type=click.FloatRange(min=5.0),
    default=20.0,
    help="Each calibration window of the scaling model.",
)
@report_options
def bench_model(
    envs,
    seconds,
    repeats,
    measured,
    learner_rates,
    plot_dir,
    scaling_records,
    scaling_seconds,
    json_path,
    markdown_path,
) -> None:
    """Unit costs measured here, the cost model checked against measured runs, and the
    shards, actor cores and bandwidth 360, 1,000 and 4,000 Ape-X actors need; with
    --scaling, each point of a scaling sweep and its knee predicted, and (with Pong's
    costs) the nodes of actors until a CUDA learner binds."""
    from bench import plots
    from bench.system import cost_model, model_suite

    results = REPO_ROOT / "bench" / "results"
    measured = measured or sorted([*results.glob("system-*.json"), *results.glob("fleet-*.json")])

    def run_suite(memory_bytes: int | None) -> dict:
        result = model_suite.run(
            envs or ("CartPole-v1", "Pong"),
            seconds,
            measured,
            learner_rates or (cost_model.PAPER_LEARNER_UPDATES,),
            progress,
            repeats,
            scaling_records,
            scaling_seconds,
        )
        if plot_dir:
            for path in plots.plot_model(result["config"], plot_dir):
                progress(f"wrote {path}")
        return result

    run_bench(model_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("system")
@click.option("--quick", is_flag=True, help="One small configuration, a 3 s window.")
@click.option(
    "--actors",
    "actor_counts",
    multiple=True,
    type=click.IntRange(min=1),
    help="Actor counts [1 2 4 ... 64].",
)
@click.option(
    "--shards",
    "shard_counts",
    multiple=True,
    type=click.IntRange(min=1),
    help="Shard counts [1 2 4].",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=1),
    default=None,
    help="Measured window per configuration [12].",
)
@click.option("--envs-per-actor", type=click.IntRange(min=1), default=4, help="Per process.")
@click.option(
    "--layout",
    "layouts",
    multiple=True,
    type=LAYOUT,
    help="PROCESSESxENVS, e.g. 4x64 (replaces --actors).",
)
@report_options
def bench_system(
    quick, actor_counts, shard_counts, seconds, envs_per_actor, layouts, json_path, markdown_path
) -> None:
    """Whole-system throughput, policy lag, start, CPU and memory per role as actors grow."""
    from bench.system import system_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return system_suite.run(
            quick=quick,
            actor_counts=actor_counts or None,
            shard_counts=shard_counts or None,
            envs_per_actor=envs_per_actor,
            layouts=layouts,
            seconds_per_window=seconds,
            memory_bytes=memory_bytes,
            progress=progress,
        )

    run_bench(system_suite.SUITE, run_suite, json_path, markdown_path)
