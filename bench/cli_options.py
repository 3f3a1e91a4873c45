"""Options and plumbing shared by the ``apex bench`` commands."""

from __future__ import annotations

from pathlib import Path

import click

from bench.workers import REPO_ROOT


def parse_peer_python(values: tuple[str, ...]) -> dict[str, str]:
    mapping = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"{value!r} is not NAME=PATH", param_hint="--peer-python")
        if not Path(path).exists():
            raise click.BadParameter(
                f"interpreter {path!r} does not exist", param_hint="--peer-python"
            )
        mapping[name] = path
    return mapping


def report_options(command):
    """``--json`` and ``--markdown``, shared by every benchmark command."""
    command = click.option(
        "--markdown",
        "markdown_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the markdown table here (it is always printed).",
    )(command)
    return click.option(
        "--json",
        "json_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write JSON here.",
    )(command)


def timing_options(what: str, default_s: float, quick_s: float, min_s: float):
    """``--repeats`` and ``--seconds``: timed ``what``s per figure and their length."""

    def decorate(command):
        command = click.option(
            "--seconds",
            "seconds_per_repeat",
            type=click.FloatRange(min=min_s),
            default=None,
            help=f"Seconds per timed {what} [default: {default_s}, {quick_s} with --quick].",
        )(command)
        return click.option(
            "--repeats", type=click.IntRange(min=1), default=5, help=f"Timed {what}s per figure."
        )(command)

    return decorate


class Layout(click.ParamType):
    name = "PxK"

    def convert(self, value, param, ctx):
        parts = str(value).lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            self.fail(f"{value!r} is not PROCESSESxENVS (two positive integers)", param, ctx)
        return int(parts[0]), int(parts[1])


LAYOUT = Layout()


def progress(line: str) -> None:
    click.echo(f"... {line}", err=True)


def run_bench(suite: str, run_suite, json_path: Path | None, markdown_path: Path | None) -> None:
    """Runs one suite into a new document, writes JSON and markdown, fails if invalid."""
    from bench import report

    document = report.new_document(REPO_ROOT)
    report.add_suite(document, suite, run_suite(document["machine"]["memory_bytes"]))
    problems = report.validate(document)
    if json_path:
        report.write_json(document, json_path)
    echo_markdown(report.markdown(document), markdown_path)
    if problems:
        raise click.ClickException("benchmark document failed validation: " + "; ".join(problems))


def echo_markdown(text: str, markdown_path: Path | None) -> None:
    """Prints a suite's markdown, and writes it to ``markdown_path`` if given."""
    if markdown_path:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(text)
    click.echo(text)


def sitting_savers(document: dict, suite: str, task: dict, json_path: Path | None):
    """``(save, saved_so_far)`` for a sitting of runs: ``save(result)`` makes ``result`` the
    document's suite and rewrites the JSON; ``saved_so_far(runs)`` writes the runs alone, so
    a sitting stopped midway resumes from them."""
    from bench import report

    def save(result: dict) -> None:
        report.replace_suite(document, suite, result, json_path)

    def saved_so_far(runs: list[dict]) -> None:
        if json_path:
            save({"records": [], "ratios": [], "config": {"task": task, "runs": runs}})

    return save, saved_so_far
