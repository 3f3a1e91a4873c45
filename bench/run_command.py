"""``apex bench run``: several suites into one directory, with a report and plots; which
suites it knows and how it runs each is ``bench.registry``'s."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli_options import progress
from bench.registry import DEFAULT_RUN, RUN_SUITES, run_suite
from bench.workers import REPO_ROOT


@click.command("run")
@click.argument("suites", nargs=-1, type=click.Choice(RUN_SUITES))
@click.option("--quick", is_flag=True, help="Every suite tiny: about a minute in all.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results"),
    help="Directory for one JSON per suite, REPORT.md and the plots.",
)
@click.option("--plots/--no-plots", default=True, help="Write PNG plots (needs matplotlib).")
def bench_run(suites, quick, out, plots) -> None:
    """Run several suites (default: all but frames) into one directory, with a report and
    plots."""
    from apex.envs.families import EnvUnavailable
    from bench import report

    chosen = suites or DEFAULT_RUN
    out.mkdir(parents=True, exist_ok=True)
    sections, problems = [], []
    for suite in chosen:
        document = report.new_document(REPO_ROOT)
        try:
            result = run_suite(suite, quick, document["machine"]["memory_bytes"], progress)
        except (ImportError, EnvUnavailable) as exc:  # a peer or extra its cases did not name
            reason = f"{type(exc).__name__}: {exc}"
            progress(f"{suite}: unavailable ({reason})")
            result = {
                "records": [report.unavailable_record(suite, "all", "apex", reason)],
                "ratios": [],
                "config": {},
            }
        report.add_suite(document, suite, result)
        problems += [f"{suite}: {p}" for p in report.validate(document)]
        report.write_json(document, out / f"{suite}.json")
        sections.append(report.markdown(document))
        if plots:
            from bench.plots import plot_document

            for path in plot_document(document, out / "plots"):
                sections.append(f"![{path.stem}](plots/{path.name})\n")
    (out / "REPORT.md").write_text("# Benchmark report\n\n" + "\n".join(sections))
    click.echo(f"wrote {', '.join(f'{s}.json' for s in chosen)} and REPORT.md to {out}")
    if problems:
        raise click.ClickException("benchmark documents failed validation: " + "; ".join(problems))
