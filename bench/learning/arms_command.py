"""``apex bench arms``: learning records of one environment side by side
(``bench.learning.arms``)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("arms")
@click.argument(
    "records", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The comparison as a record: the arms' figures, the comparisons.",
)
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="One PNG of every arm's curve (whole records: a summarised one's .full.json.gz).",
)
def bench_arms(records, json_path, markdown_path, plot_path) -> None:
    """Arms of one environment from learning records made apart (apex bench learn), the
    first arm against each other: IQMs with 95% intervals at every shared figure, the
    difference, P(the first does better) and whether the intervals are apart."""
    from bench import report
    from bench.learning import arms
    from bench.workers import REPO_ROOT

    try:
        gathered = arms.gather([(str(path), arms.read_record(path)) for path in records])
        outcome = arms.result(gathered)
        drawn = arms.plot(gathered, plot_path) if plot_path else None
    except arms.ArmsError as exc:
        raise click.ClickException(str(exc)) from exc
    text = arms.markdown(outcome)
    click.echo(text)
    if markdown_path:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(text)
    if drawn:
        click.echo(f"curves: {drawn}")
    if json_path:
        document = report.new_document(REPO_ROOT)
        document["suites"][arms.ARMS_SUITE] = {
            "config": outcome["config"],
            "comparisons": outcome["comparisons"],
        }
        document["records"] = outcome["records"]
        problems = report.validate(document)
        if problems:
            raise click.ClickException("arms record failed validation: " + "; ".join(problems))
        report.write_json(document, json_path)
