"""What command-line options change in a run config: one overrides dict, merged over the
file's values by ``launch.config.resolve``."""

from __future__ import annotations

import tomllib

import click

from apex.envs.presets import merged_sections as merge_overrides

__all__ = ["apply_setting", "merge_overrides", "run_overrides"]


def run_overrides(
    *,
    env=None,
    actors=None,
    shards=None,
    seed=None,
    device=None,
    target_return=None,
    max_updates=None,
    max_time=None,
    envs_per_actor=None,
    settings=(),
) -> dict:
    """The config overrides that ``apex train`` and ``apex slurm submit`` options make.

    Raises:
        click.BadParameter: a ``--set`` that is not ``SECTION.KEY=VALUE``.
    """
    overrides: dict = {}
    for key, value in (("env", env), ("actors", actors), ("shards", shards), ("seed", seed)):
        if value is not None:
            overrides[key] = value
    if env is not None and any(setting.startswith("env.") for setting in settings):
        overrides["env"] = {"id": env}  # --set env.kwargs.KEY=VALUE fills in the table
    learner: dict = {}
    for key, value in (
        ("device", device),
        ("target_return", target_return),
        ("max_updates", max_updates),
        ("max_time_s", max_time),
    ):
        if value is not None:
            learner[key] = value
    if learner:
        overrides["learner"] = learner
    if envs_per_actor is not None:
        overrides["actor"] = {"envs_per_actor": envs_per_actor}
    for setting in settings:
        apply_setting(overrides, setting)
    return overrides


def apply_setting(overrides: dict, setting: str) -> None:
    """Adds one ``SECTION.KEY=VALUE`` (or ``KEY=VALUE``, or an algorithm's
    ``learner.dqn.KEY=VALUE``) to ``overrides``; the value is read as TOML, and a bare
    word as a string."""
    key, sep, text = setting.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) not in (1, 2, 3) or not all(parts):
        raise click.BadParameter(f"{setting!r} is not SECTION.KEY=VALUE", param_hint="--set")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    table = overrides
    for part in parts[:-1]:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise click.BadParameter(
                f"{setting!r}: {part} was set to a value, not a section", param_hint="--set"
            )
    table[parts[-1]] = value
