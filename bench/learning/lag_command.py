"""``apex bench lag``: IMPALA with actors held back K weight versions
(``bench.learning.lag_suite``), resumable across sittings like ``apex bench learn``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.cli_options import progress

QUICK_BUDGET_S = 20.0


def previous_runs(paths: tuple[Path, ...], env: str, budget_s: float) -> list[dict]:
    """The runs of the lag records at ``paths``, which must be of ``env`` and its budget.

    Raises:
        click.BadParameter: a file that is no lag record with runs, or of another env or
            budget (its times would not compare).
    """
    runs = []
    for path in paths:
        try:
            config = json.loads(path.read_text())["suites"]["lag"]["config"]
            held = (config["env"], float(config["budget_s"]), config["runs"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise click.BadParameter(
                f"{path}: not a lag record with its runs ({exc})", param_hint="--resume"
            ) from exc
        if held[:2] != (env, budget_s):
            raise click.BadParameter(
                f"{path} holds {held[0]} at {held[1]:g} s, not {env} at {budget_s:g} s",
                param_hint="--resume",
            )
        runs += held[2]
    return runs


@click.command("lag")
@click.option("--env", default="CartPole-v1", show_default=True, help="A discrete-action env.")
@click.option(
    "--lag",
    "lags",
    type=click.IntRange(min=0),
    multiple=True,
    help="actor.refresh_versions values (repeatable; 0: actors in lock-step) [0 1 5 20 50].",
)
@click.option("--seed", "seeds", type=int, multiple=True, help="Seeds [0-9].")
@click.option(
    "--budget",
    type=click.FloatRange(min=1),
    default=90.0,
    show_default=True,
    help="Training seconds a run may take to a confirmed solve.",
)
@click.option(
    "--resume",
    "resume_paths",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Lag records whose runs count and are not run again.",
)
@click.option(
    "--quick", is_flag=True, help=f"Lags 0 and 5, seed 0, {QUICK_BUDGET_S:g} s: plumbing only."
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
    default=None,
    help="Where the curves' PNG goes [bench/results/plots; none for a --quick run].",
)
def bench_lag(
    env, lags, seeds, budget, resume_paths, quick, json_path, markdown_path, plot_dir
) -> None:
    """IMPALA with actors held back K weight versions: V-trace against no correction."""
    from bench import report
    from bench.learning import lag_report, lag_suite
    from bench.workers import REPO_ROOT

    if quick:
        lags, seeds, budget = lags or (0, 5), seeds or (0,), QUICK_BUDGET_S
    lags = tuple(lags) or lag_suite.DEFAULT_LAGS
    seeds = tuple(seeds) or lag_suite.DEFAULT_SEEDS
    previous = previous_runs(resume_paths, env, budget)
    document = report.new_document(REPO_ROOT)

    def save(result: dict) -> None:
        report.replace_suite(document, lag_suite.SUITE, result, json_path)

    def saved_so_far(runs: list[dict]) -> None:  # a sitting stopped midway resumes from it
        save(lag_suite.summarize(env, lags, seeds, budget, runs))

    save(
        lag_suite.run(
            env=env,
            lags=lags,
            seeds=seeds,
            budget_s=budget,
            previous=previous,
            on_run=saved_so_far,
            progress=progress,
        )
    )
    text = lag_report.markdown(document)
    if markdown_path:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(text)
    click.echo(text)
    if plot_dir is not None or not quick:
        plots = lag_report.plot(document, plot_dir or REPO_ROOT / "bench" / "results" / "plots")
        click.echo(f"curves: {', '.join(str(p) for p in plots)}")
    problems = report.validate(document)
    if problems:
        raise click.ClickException("lag record failed validation: " + "; ".join(problems))
