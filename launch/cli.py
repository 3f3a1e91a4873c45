"""The ``apex`` command: one click group with a subcommand per role or tool.

The role commands live in ``launch.role_commands`` and the Slurm ones in
``launch.slurm_commands``; ``apex bench`` is the benchmark suite's own group
(``bench.commands``). Groups are imported only when their command runs: ``bench`` sits on
top of ``launch`` and is named here, never imported at start, and ``apex train`` does not
pay for the others' imports.
"""

from __future__ import annotations

import importlib
import logging

import click

# name -> "module:attribute" of each subcommand.
COMMANDS = {
    "replay": "launch.role_commands:replay_role",
    "learner": "launch.role_commands:learner_role",
    "actor": "launch.role_commands:actor_role",
    "evaluator": "launch.role_commands:evaluator_role",
    "train": "launch.role_commands:train",
    "status": "launch.watch_commands:status",
    "plot": "launch.watch_commands:plot",
    "top": "launch.watch_commands:top",
    "keys": "launch.keys_commands:keys",
    "slurm": "launch.slurm_commands:slurm",
    "bench": "bench.commands:bench",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported when asked for (click's lazy-loading
    pattern)."""

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


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
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
