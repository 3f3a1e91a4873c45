"""``apex bench``: the throughput benchmark suites, each writing JSON and markdown."""

from __future__ import annotations

from pathlib import Path

import click

REPO_ROOT = Path(__file__).resolve().parent.parent


def _parse_peer_python(values: tuple[str, ...]) -> dict[str, str]:
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


def _report_options(command):
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


@click.group(context_settings={"show_default": True})
def bench() -> None:
    """Throughput benchmarks; each writes JSON records and a markdown table."""


@bench.command("replay")
@click.option("--quick", is_flag=True, help="Tiny stores and short repeats (seconds in all).")
@click.option(
    "--impl",
    "implementations",
    multiple=True,
    type=click.Choice(["apex", "apex-fresh", "cpprb", "torchrl"]),
    help="Implementations to measure (default: all).",
)
@click.option(
    "--case",
    "case_names",
    multiple=True,
    help="Cases to run, by name or kind (small, atari); default: all.",
)
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="Timed repeats per figure.")
@click.option(
    "--seconds",
    "seconds_per_repeat",
    type=click.FloatRange(min=0.001),
    default=None,
    help="Seconds per timed repeat [default: 0.4, 0.05 with --quick].",
)
@click.option(
    "--peer-python",
    multiple=True,
    metavar="NAME=PATH",
    help="Run a peer under another interpreter, e.g. torchrl=.venv-peers/bin/python.",
)
@_report_options
def bench_replay(
    quick: bool,
    implementations: tuple[str, ...],
    case_names: tuple[str, ...],
    repeats: int,
    seconds_per_repeat: float | None,
    peer_python: tuple[str, ...],
    json_path: Path | None,
    markdown_path: Path | None,
) -> None:
    """Prioritized replay core beside cpprb and torchrl: insert, sample, update, loop."""
    from bench import replay_suite

    peers = _parse_peer_python(peer_python)

    def run_suite(memory_bytes: int | None) -> dict:
        return replay_suite.run(
            quick=quick,
            implementations=implementations or replay_suite.IMPLEMENTATIONS,
            case_names=case_names or None,
            repeats=repeats,
            seconds_per_repeat=seconds_per_repeat,
            peer_python=peers,
            memory_bytes=memory_bytes,
            progress=lambda line: click.echo(f"... {line}", err=True),
        )

    _run_bench(replay_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("shard")
@click.option("--quick", is_flag=True, help="One pusher, short windows, small stores.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="Timed windows per figure.")
@click.option(
    "--seconds",
    "seconds_per_repeat",
    type=click.FloatRange(min=0.01),
    default=None,
    help="Seconds per timed window [default: 1.0, 0.2 with --quick].",
)
@click.option(
    "--pushers", multiple=True, type=click.IntRange(min=1), help="Pusher process counts [1 2 4]."
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["small", "atari"]),
    help="Transition kinds to ingest [both].",
)
@_report_options
@click.option(
    "--ingest-rate",
    type=click.FloatRange(min=0),
    default=100_000.0,
    help="Transitions/s inserted during the sample-service figure (0: unpaced).",
)
def bench_shard(
    quick, repeats, seconds_per_repeat, pushers, kinds, json_path, markdown_path, ingest_rate
) -> None:
    """Shard ingest beside raw pyzmq, and the learner's sample service while actors insert."""
    from bench import shard_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return shard_suite.run(
            quick=quick,
            repeats=repeats,
            seconds_per_repeat=seconds_per_repeat,
            pusher_counts=pushers or None,
            kinds=kinds or ("small", "atari"),
            ingest_rate=ingest_rate,
            progress=lambda line: click.echo(f"... {line}", err=True),
        )

    _run_bench(shard_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("solve")
@click.option("--quick", is_flag=True, help="One seed, 15 s each: checks the plumbing only.")
@click.option("--seed", "seeds", multiple=True, type=int, help="Seeds to run [0 1 2].")
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=1),
    default=None,
    help="Time limit per run [180, 15 with --quick].",
)
@click.option(
    "--impl",
    "implementations",
    multiple=True,
    type=click.Choice(["apex", "sb3-dqn"]),
    help="Implementations to run [both].",
)
@_report_options
def bench_solve(quick, seeds, max_seconds, implementations, json_path, markdown_path) -> None:
    """Wall-clock time to solve CartPole-v1: apex train beside stable-baselines3 DQN."""
    from bench import solve_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return solve_suite.run(
            quick=quick,
            seeds=seeds or (0, 1, 2),
            max_seconds=max_seconds,
            implementations=implementations or ("apex", "sb3-dqn"),
            progress=lambda line: click.echo(f"... {line}", err=True),
        )

    _run_bench(solve_suite.SUITE, run_suite, json_path, markdown_path)


def _run_bench(suite: str, run_suite, json_path: Path | None, markdown_path: Path | None) -> None:
    """Runs one suite into a new document, writes JSON and markdown, fails if invalid."""
    from bench import report

    document = report.new_document(REPO_ROOT)
    report.add_suite(document, suite, run_suite(document["machine"]["memory_bytes"]))
    problems = report.validate(document)
    if json_path:
        report.write_json(document, json_path)
    text = report.markdown(document)
    if markdown_path:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(text)
    click.echo(text)
    if problems:
        raise click.ClickException("benchmark document failed validation: " + "; ".join(problems))
