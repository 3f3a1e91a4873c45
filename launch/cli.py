"""The ``apex`` command: one click group with a subcommand per role or tool."""

from __future__ import annotations

import logging
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(package_name="apex-rl")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    help="Logging threshold for every role.",
)
def main(log_level: str) -> None:
    """Ape-X-style distributed reinforcement learning: actors, sharded replay, one learner."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


class FieldParam(click.ParamType):
    """``NAME:SHAPE:DTYPE`` with SHAPE comma-separated and empty for scalars,
    e.g. ``obs:4,84,84:uint8`` or ``reward::float32``."""

    name = "NAME:SHAPE:DTYPE"

    def convert(self, value, param, ctx):
        from replay.errors import InvalidBatchError
        from replay.spec import FieldSpec

        if isinstance(value, FieldSpec):
            return value
        parts = value.split(":")
        if len(parts) != 3:
            self.fail(f"{value!r} is not NAME:SHAPE:DTYPE", param, ctx)
        name, shape_text, dtype = parts
        try:
            shape = tuple(int(d) for d in shape_text.split(",") if d.strip())
            return FieldSpec(name, shape, dtype)
        except (ValueError, InvalidBatchError) as exc:
            self.fail(f"{value!r}: {exc}", param, ctx)


SMALL_FIELDS = (
    "obs:4:float32",
    "action::int64",
    "reward::float32",
    "discount::float32",
    "next_obs:4:float32",
)


@main.command("replay")
@click.option(
    "--field",
    "fields",
    multiple=True,
    type=FieldParam(),
    default=SMALL_FIELDS,
    help="A stored field, repeated once per field.",
)
@click.option("--capacity", type=click.IntRange(min=1), default=1 << 20, help="Transitions kept.")
@click.option("--alpha", type=click.FloatRange(min=0), default=0.6, help="Priority exponent.")
@click.option(
    "--min-size", type=click.IntRange(min=1), default=1, help="Stored transitions before sampling."
)
@click.option(
    "--samples-per-insert",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Hold this replay ratio (sampled per inserted transition); default: no limit.",
)
@click.option(
    "--error-buffer",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Allowed deviation from --samples-per-insert, in transitions.",
)
@click.option("--host", default="127.0.0.1", help="Address to bind (0.0.0.0 for all).")
@click.option(
    "--insert-port", type=click.IntRange(0, 65535), default=0, help="PULL port (0: free port)."
)
@click.option(
    "--request-port", type=click.IntRange(0, 65535), default=0, help="ROUTER port (0: free port)."
)
@click.option("--shard-index", type=click.IntRange(min=0), default=0, help="This shard's index.")
@click.option("--seed", type=int, default=0, help="Seed of the sampling generator.")
def replay_role(
    fields,
    capacity,
    alpha,
    min_size,
    samples_per_insert,
    error_buffer,
    host,
    insert_port,
    request_port,
    shard_index,
    seed,
) -> None:
    """Run one replay shard until SIGINT or SIGTERM.

    Prints one JSON line with its endpoints once bound (``{"ready": ...}``)."""
    import json
    import signal

    from replay.shard import ShardConfig, ShardServer
    from replay.spec import TransitionSpec

    try:
        spec = TransitionSpec(fields)
        config = ShardConfig(
            spec=spec, capacity=capacity, alpha=alpha, min_size_to_sample=min_size,
            samples_per_insert=samples_per_insert, error_buffer=error_buffer, host=host,
            insert_port=insert_port, request_port=request_port, shard_index=shard_index, seed=seed,
        )  # fmt: skip
        server = ShardServer(config)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    previous = {}

    def request_stop(signum, frame):
        server.stop()
        signal.signal(signum, previous[signum])  # a second signal gets the default action

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, request_stop)
    ready = {
        "insert": server.insert_endpoint,
        "request": server.request_endpoint,
        "shard": shard_index,
    }
    click.echo(json.dumps({"ready": ready}), nl=True)
    server.serve()


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


@main.group()
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
