"""``apex bench compare``: ratios between two benchmark documents, to catch regressions."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("compare")
@click.argument("old", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--threshold",
    type=click.FloatRange(min=0, min_open=True),
    default=0.9,
    help="Flag figures whose new/old speed falls below this.",
)
@click.option("--fail-on-regression", is_flag=True, help="Exit 1 if any figure is flagged.")
def bench_compare(old, new, threshold, fail_on_regression) -> None:
    """Ratios between two benchmark JSON files (NEW against OLD), to catch regressions."""
    import json

    from bench import compare

    documents = []
    for path in (old, new):
        try:
            documents.append(json.loads(path.read_text()))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"{path} is not a benchmark JSON file: {exc}") from exc
    rows = compare.compare(*documents, threshold=threshold)
    if not rows:
        raise click.ClickException(f"{old} and {new} share no figure to compare")
    click.echo(compare.markdown(rows, threshold))
    if fail_on_regression and any(row["regression"] for row in rows):
        raise SystemExit(1)
