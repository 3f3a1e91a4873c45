"""``apex bench fuzz``: hostile messages against a live shard (``bench.faults.fuzz_suite``)."""

from __future__ import annotations

import click

from bench.cli_options import report_options, run_bench


@click.command("fuzz")
@click.option(
    "--messages",
    type=click.IntRange(min=100),
    default=100_000,
    help="Messages per endpoint: hostile ones mixed with valid traffic on the shard's two, "
    "then as many descriptor-level ones on each decoding endpoint (shard insert and "
    "request, learner episodes, actor weights).",
)
@click.option("--seed", type=int, default=0, help="Seed of the message stream (replays it).")
@report_options
def bench_fuzz(messages, seed, json_path, markdown_path) -> None:
    """Fuzz a live shard on both endpoints, then every decoding endpoint at the descriptor
    level; fails unless every check passes."""
    from bench.faults import fuzz_suite

    outcomes = []

    def run_suite(memory_bytes: int | None) -> dict:
        result = fuzz_suite.run(messages, seed, lambda line: click.echo(f"... {line}", err=True))
        outcomes.append(result["config"])
        return result

    run_bench(fuzz_suite.SUITE, run_suite, json_path, markdown_path)
    checks = outcomes[0]["checks"]
    for name, passed in checks.items():
        click.echo(f"{'pass' if passed else 'FAIL'}  {name}")
    click.echo(f"rejected by reason: {outcomes[0]['rejected_by_reason']}")
    if not all(checks.values()):
        raise click.ClickException("the fuzzed shard failed a check (see above)")
