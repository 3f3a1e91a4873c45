"""``apex bench``: the benchmark suites, each writing JSON and markdown. The commands are
listed in ``bench.registry`` and imported when they run."""

from __future__ import annotations

import importlib

import click

from bench.registry import COMMANDS


class LazyGroup(click.Group):
    """A group whose subcommands are imported when asked for (click's lazy-loading
    pattern), from a ``name -> "module:attribute"`` table."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self._lazy:
            return super().get_command(ctx, name)
        module, attribute = self._lazy[name].split(":")
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"show_default": True})
def bench() -> None:
    """Throughput benchmarks; each writes JSON records and a markdown table."""
