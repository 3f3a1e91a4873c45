"""The ``apex`` command: one click group with a subcommand per role or tool.

Its subcommands are the package's entry points of the group ``apex.commands``
(``pyproject.toml``): the role commands in ``launch.role_commands``, the Slurm ones in
``launch.slurm_commands``, and ``apex bench``, the benchmark suite's own group
(``bench.commands``), which sits on top of ``launch`` and is never imported by it. A
command is imported only when it runs, so ``apex train`` does not pay for the others'
imports; another installed package may add its own commands to the group.
"""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points

import click

COMMAND_GROUP = "apex.commands"


class EntryPointGroup(click.Group):
    """A group whose subcommands are the entry points of one group, loaded when asked
    for (click's lazy-loading pattern)."""

    def __init__(self, *args, entry_point_group: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._group = entry_point_group

    def _entry_points(self) -> dict[str, EntryPoint]:
        return {point.name: point for point in entry_points(group=self._group)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._entry_points()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        point = self._entry_points().get(name)
        if point is None:
            return super().get_command(ctx, name)
        try:
            command = point.load()
        except (ImportError, AttributeError) as exc:
            raise click.ClickException(
                f"command {name!r} ({point.value}, an entry point of {self._group}) cannot "
                f"be loaded: {exc}"
            ) from exc
        if not isinstance(command, click.Command):
            raise click.ClickException(
                f"command {name!r} ({point.value}) is not a click "
                f"command but {type(command).__name__}"
            )
        return command


@click.group(
    cls=EntryPointGroup,
    entry_point_group=COMMAND_GROUP,
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
