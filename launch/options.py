"""Click options shared by more than one ``apex`` command."""

from __future__ import annotations

import click


def stop_options(command):
    """``--target-return``, ``--max-updates`` and ``--max-time``: when a run stops."""
    command = click.option(
        "--max-time",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Stop after this many seconds of training.",
    )(command)
    command = click.option(
        "--max-updates",
        type=click.IntRange(min=1),
        default=None,
        help="Stop after this many updates.",
    )(command)
    return click.option(
        "--target-return",
        type=float,
        default=None,
        help="Stop when the greedy evaluation mean reaches this.",
    )(command)


def settings_option(command):
    """``--set SECTION.KEY=VALUE``, repeated: any config setting."""
    return click.option(
        "--set",
        "settings",
        multiple=True,
        metavar="SECTION.KEY=VALUE",
        help="Any other setting, e.g. learner.batch_size=256 or slurm.partition=gpu "
        "(value as TOML).",
    )(command)
