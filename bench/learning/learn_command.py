"""``apex bench learn``: the learning benchmark on one task (``bench.learning.learn_suite``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.cli_options import echo_markdown, progress, sitting_savers
from bench.learning.learn_tasks import QUICK_BUDGET_S, TASKS, quick_task


def run_side(run: dict) -> str:
    """``apex``, or ``peer`` for a run of the task's peer (its implementation's name)."""
    return "apex" if run["implementation"] == "apex" else "peer"


def previous_runs(paths: tuple[Path, ...], name: str, sides: tuple[str, ...] = ()) -> list[dict]:
    """The runs of the records at ``paths`` (of task ``name``), of ``sides`` only if given.

    Raises:
        click.BadParameter: a file that is no learning record of the task.
    """
    runs = []
    for path in paths:
        try:
            document = json.loads(path.read_text())
            config = document["suites"]["learn"]["config"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise click.BadParameter(
                f"{path}: not a learning record ({exc})", param_hint="--resume"
            ) from exc
        held = config["task"].get("name") or config["task"]["env"]  # older records: env
        if held != name:
            raise click.BadParameter(f"{path} holds {held}, not {name}", param_hint="--resume")
        runs += [run for run in config["runs"] if not sides or run_side(run) in sides]
    return runs


@click.command("learn")
@click.option(
    "--task",
    "env",
    type=click.Choice(list(TASKS)),
    default="CartPole-v1",
    help="The task (bench.learning.learn_tasks).",
)
@click.option("--seed", "seeds", multiple=True, type=int, help="Seeds [the task's 0-9].")
@click.option(
    "--side",
    "sides",
    multiple=True,
    type=click.Choice(["apex", "peer"]),
    help="Which sides run [both].",
)
@click.option(
    "--keep-training",
    is_flag=True,
    help="Train on past a confirmed solve to the budget: 'stays solved'.",
)
@click.option(
    "--set",
    "apex_settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="More apex settings (apex train --set), to tune on seeds 100+.",
)
@click.option(
    "--resume",
    "resume_paths",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Records whose runs count and are not run again (sittings merged).",
)
@click.option(
    "--keep-side",
    "keep_sides",
    multiple=True,
    type=click.Choice(["apex", "peer"]),
    help="With --resume: keep only this side's runs from the records, and run "
    "the other's again (a side's preset changed) [both].",
)
@click.option("--quick", is_flag=True, help=f"Seed 0, {QUICK_BUDGET_S:g} s: plumbing only.")
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
    default=None,
    help="Where the PNG goes [bench/results/plots; none for a --quick, --set or --seed run].",
)
def bench_learn(
    env,
    seeds,
    sides,
    keep_training,
    apex_settings,
    resume_paths,
    keep_sides,
    quick,
    json_path,
    markdown_path,
    plot_dir,
) -> None:
    """Learning speed with confirmed solves and 95% intervals: apex beside its peer
    (stable-baselines3 with the rl-zoo settings), the same rule on both sides."""
    from bench import report
    from bench.learning import learn_report, learn_suite
    from bench.workers import REPO_ROOT

    task = TASKS[env]
    if quick:
        task = quick_task(task)
    if keep_sides and not resume_paths:
        raise click.BadParameter("keeps runs of records: give --resume", param_hint="--keep-side")
    previous = previous_runs(resume_paths, env, keep_sides)
    document = report.new_document(REPO_ROOT)

    save, saved_so_far = sitting_savers(document, learn_suite.SUITE, vars(task), json_path)
    result = learn_suite.run(
        task,
        seeds=seeds or task.seeds,
        implementations=sides or ("apex", "peer"),
        previous=previous,
        keep_training=keep_training,
        apex_settings=apex_settings,
        progress=progress,
        on_run=saved_so_far,
        warm_up=not quick,
    )
    save(result)
    echo_markdown(learn_report.markdown(document), markdown_path)
    if plot_dir is None and (apex_settings or seeds or quick):
        # A check, a tuning sitting or a few seeds must not draw over a record's curves.
        click.echo("curves: not drawn for a --quick, --set or --seed run (give --plots DIR)")
    else:
        plots = learn_report.plot(document, plot_dir or REPO_ROOT / "bench" / "results" / "plots")
        click.echo(f"curves: {', '.join(str(p) for p in plots)}")
    problems = report.validate(document)
    if problems:
        raise click.ClickException("learning record failed validation: " + "; ".join(problems))
