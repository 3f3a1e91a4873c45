"""``apex bench race``: apex and stable-baselines3 TD3 for the same wall-clock budget on one
continuous-control env, both learning curves in one PNG."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli_options import report_options, run_bench


@click.command("race")
@click.option(
    "--env",
    type=click.Choice(["HalfCheetah-v5", "Hopper-v5", "Pendulum-v1", "LunarLanderContinuous-v3"]),
    default="HalfCheetah-v5",
    help="The env (MuJoCo ones need the mujoco extra).",
)
@click.option(
    "--minutes",
    type=click.FloatRange(min=0.1),
    default=30.0,
    help="Wall-clock budget of each side.",
)
@click.option("--seed", type=int, default=0, help="Seed of both sides.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PNG of both curves [bench/results/plots/race-ENV.png].",
)
@report_options
def bench_race(env, minutes, seed, plot_path, json_path, markdown_path) -> None:
    """apex (Ape-X DPG) beside SB3 TD3 with the rl-zoo settings, the same minutes each:
    last and best greedy evaluation, and both curves against wall-clock time."""
    from bench import race_suite
    from bench.workers import REPO_ROOT

    documents = []

    def run_suite(memory_bytes: int | None) -> dict:
        result = race_suite.run(
            env=env,
            seconds=minutes * 60,
            seed=seed,
            progress=lambda line: click.echo(f"... {line}", err=True),
        )
        documents.append(result)
        return result

    run_bench(race_suite.SUITE, run_suite, json_path, markdown_path)
    out = plot_path or REPO_ROOT / "bench" / "results" / "plots" / f"race-{env}.png"
    click.echo(f"curves: {race_suite.plot_race(documents[0], out)}")
    ahead = documents[0]["config"]["apex_ahead_at_end"]
    click.echo(f"apex ahead at the end: {ahead}")
