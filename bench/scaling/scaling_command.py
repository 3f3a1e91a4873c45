"""``apex bench scaling``: time to a confirmed solve against actor count
(``bench.scaling.scaling_suite``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import click

from bench.cli_options import echo_markdown, progress, sitting_savers
from bench.scaling.scaling_tasks import (
    ACTOR_COUNTS,
    FIVE_SEEDS,
    TASKS,
    quick_task,
    throughput_task,
)


def previous_runs(paths: tuple[Path, ...], name: str, hosts: bool = False) -> list[dict]:
    """The runs of the scaling records at ``paths`` (of task ``name``) made across hosts,
    or on one host: they measure different paths, so each resumes its own.

    Raises:
        click.BadParameter: a file that is no scaling record of the task.
    """
    runs = []
    for path in paths:
        try:
            config = json.loads(path.read_text())["suites"]["scaling"]["config"]
            held = config["task"]["name"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise click.BadParameter(
                f"{path}: not a scaling record ({exc})", param_hint="--resume"
            ) from exc
        if held != name:
            raise click.BadParameter(f"{path} holds {held}, not {name}", param_hint="--resume")
        runs += [r for r in config["runs"] if bool(r.get("hosts")) == hosts]
    return runs


@click.command("scaling")
@click.option(
    "--task",
    "name",
    type=click.Choice(list(TASKS)),
    default="cartpole-sleep5ms",
    help="The task (bench.scaling.scaling_tasks).",
)
@click.option(
    "--actors",
    "counts",
    multiple=True,
    type=click.IntRange(1, 1024),
    help=f"Actor counts [{', '.join(map(str, ACTOR_COUNTS))}].",
)
@click.option(
    "--seed", "seeds", multiple=True, type=int, help=f"Seeds [{', '.join(map(str, FIVE_SEEDS))}]."
)
@click.option(
    "--parallel-up-to",
    type=click.IntRange(0),
    default=0,
    help="Points of at most this many actors run their seeds side by side.",
)
@click.option(
    "--resume",
    "resume_paths",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Records whose runs count and are not run again (sittings merged).",
)
@click.option(
    "--weak-from",
    type=click.IntRange(1),
    default=None,
    help="Weak scaling: past this many actors the learner's batch grows with them.",
)
@click.option(
    "--throughput",
    "throughput_s",
    type=click.FloatRange(min=10.0),
    default=None,
    help="Throughput alone: every run trains this many seconds, a solve does not end it "
    "[seed 0 only unless --seed is given].",
)
@click.option(
    "--baseline",
    is_flag=True,
    help="Also the single-node baseline (SB3's DQN on one node's worth of env copies), "
    "every seed, in the same sitting.",
)
@click.option(
    "--hosts",
    is_flag=True,
    help="Each run a Slurm job across the three namespace hosts (learner, shard, actors; "
    "root, bench.scaling.hosts).",
)
@click.option("--quick", is_flag=True, help="Seconds a run: plumbing only, no figure.")
@click.option(
    "--stepping",
    is_flag=True,
    help="Instead of the sweep: one actor's copies stepped serially, on threads "
    "and in processes, on every task's env (actor.env_stepping).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The record, rewritten after every run.",
)
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--plots",
    "plot_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the PNG goes [none].",
)
def bench_scaling(
    name,
    counts,
    seeds,
    parallel_up_to,
    resume_paths,
    weak_from,
    throughput_s,
    baseline,
    hosts,
    quick,
    stepping,
    json_path,
    markdown_path,
    plot_dir,
) -> None:
    """Time to a confirmed solve against actor count, with speedups, efficiencies, the
    knee and what binds each point."""
    from bench import report
    from bench.scaling import scaling_report, scaling_suite
    from bench.workers import REPO_ROOT

    if stepping:
        from bench.cli_options import run_bench
        from bench.scaling import stepping_suite

        seconds, repeats = (0.5, 1) if quick else (3.0, 3)
        run_bench(
            stepping_suite.SUITE,
            lambda _memory: stepping_suite.run(
                list(TASKS.values()), seconds=seconds, repeats=repeats, progress=progress
            ),
            json_path,
            markdown_path,
        )
        return

    task = quick_task(TASKS[name]) if quick else TASKS[name]
    if weak_from:
        task = dataclasses.replace(task, weak_from=weak_from)
    if throughput_s:
        if baseline:
            raise click.BadParameter(
                "a throughput sweep has no solve to compare", param_hint="--baseline"
            )
        task = throughput_task(task, throughput_s)
        seeds = seeds or (0,)
    previous = previous_runs(resume_paths, name, hosts)
    document = report.new_document(REPO_ROOT)

    save, saved_so_far = sitting_savers(document, scaling_suite.SUITE, vars(task), json_path)
    options = {}
    cluster = contextlib.nullcontext()
    if hosts:
        from bench.faults.slurm_faults import namespace_cluster
        from bench.scaling.hosts import run_point_on_hosts

        options["runner"], cluster = run_point_on_hosts, namespace_cluster()
    with cluster:
        result = scaling_suite.run(
            task,
            counts=counts or ACTOR_COUNTS,
            seeds=seeds or FIVE_SEEDS,
            parallel_up_to=parallel_up_to,
            previous=previous,
            progress=progress,
            on_run=saved_so_far,
            warm_up=not quick and not hosts,
            baseline_seeds=(seeds or FIVE_SEEDS) if baseline else (),
            **options,
        )
    save(result)
    echo_markdown(scaling_report.markdown(document), markdown_path)
    if plot_dir:
        click.echo(f"plot: {scaling_report.plot(document, plot_dir)}")
    problems = report.validate(document)
    if problems:
        raise click.ClickException("scaling record failed validation: " + "; ".join(problems))
