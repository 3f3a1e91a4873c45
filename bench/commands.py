"""``apex bench``: the benchmark suites, each writing JSON and markdown. The commands are
listed in ``bench.registry`` and imported when they run."""

from __future__ import annotations

import click

from bench.registry import COMMANDS
from launch.cli import LazyGroup


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"show_default": True})
def bench() -> None:
    """Throughput benchmarks; each writes JSON records and a markdown table."""
