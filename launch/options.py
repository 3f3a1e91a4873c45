"""Click options and parameter types shared by more than one ``apex`` command, and the
one way a command loads its run config."""

from __future__ import annotations

from pathlib import Path

import click

from launch.run_files import CONFIG_FILE


class FieldParam(click.ParamType):
    """``NAME:SHAPE:DTYPE`` with SHAPE comma-separated and empty for scalars,
    e.g. ``obs:4,84,84:uint8`` or ``reward::float32``."""

    name = "NAME:SHAPE:DTYPE"

    def convert(self, value, param, ctx):
        from replay.errors import InvalidBatchError
        from replay.store.spec import FieldSpec

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


class ShardParam(click.ParamType):
    """``INSERT_ENDPOINT,REQUEST_ENDPOINT`` of one shard."""

    name = "INSERT,REQUEST"

    def convert(self, value, param, ctx):
        from replay.inserts.endpoints import ShardEndpoints

        if isinstance(value, ShardEndpoints):
            return value
        parts = value.split(",")
        if len(parts) != 2 or not all(p.startswith("tcp://") for p in parts):
            self.fail(f"{value!r} is not tcp://HOST:PORT,tcp://HOST:PORT", param, ctx)
        return ShardEndpoints(*parts)


class RunDirParam(click.ParamType):
    """A run's directory: an existing directory that holds the run's ``config.json``.
    Anything else is a usage error (exit code 2), as every other bad argument is."""

    name = "RUN_DIR"

    def convert(self, value, param, ctx):
        path = Path(value)
        if not path.is_dir():
            self.fail(f"{value} is not a directory", param, ctx)
        if not (path / CONFIG_FILE).is_file():
            self.fail(f"{value} is not a run directory (no config.json)", param, ctx)
        return path


RUN_DIR = RunDirParam()


def config_option(command):
    """``--config``: a run's config file (TOML, or a run directory's config.json)."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="Run config: a TOML file, or a run directory's config.json.",
    )(command)


def config_argument(command):
    """``[CONFIG_PATH]``: an optional run config file, for the commands that start runs."""
    return click.argument(
        "config_path",
        required=False,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
    )(command)


def shards_option(command):
    """``--shard INSERT,REQUEST``, once per shard."""
    return click.option(
        "--shard",
        "shards",
        multiple=True,
        required=True,
        type=ShardParam(),
        help="Each shard's endpoints (repeat per shard).",
    )(command)


def run_dir_option(required: bool, help_text: str):
    def decorate(command):
        return click.option(
            "--run-dir",
            type=click.Path(file_okay=False, path_type=Path),
            required=required,
            default=None,
            help=help_text,
        )(command)

    return decorate


def run_options(command):
    """``--env`` and ``--seed``, for the commands that start a whole run."""
    command = click.option("--seed", type=int, default=None, help="Root seed of the run.")(command)
    return click.option(
        "--env", default=None, help="Environment preset or gymnasium id [CartPole-v1]."
    )(command)


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


def security_options(command):
    """``--keys DIR`` and ``--insecure``: the run's CURVE keys, or leave to bind beyond
    loopback without them (see replay.wire.security)."""
    command = click.option(
        "--insecure",
        is_flag=True,
        help="Allow binding beyond loopback without keys (anyone who reaches the ports can "
        "read and write the run).",
    )(command)
    return click.option(
        "--keys",
        type=click.Path(exists=True, file_okay=False, resolve_path=True, path_type=Path),
        default=None,
        help="The run's CURVE keys (apex keys generate DIR); overrides the config's.",
    )(command)


def security_overrides(keys: Path | None, insecure: bool) -> dict:
    """The ``[security]`` settings ``--keys`` and ``--insecure`` ask for ({} for none)."""
    chosen = {"keys": str(keys)} if keys is not None else {}
    if insecure:
        chosen["insecure"] = True
    return {"security": chosen} if chosen else {}


def load_run_config(path: Path | None, overrides: dict):
    """The resolved run config of ``path`` (none: the defaults) with ``overrides``; the
    file's folder goes on the import path first (``launch.user_modules``), so that the
    modules beside it import from anywhere.

    Raises:
        click.UsageError: listing every problem.
    """
    from launch.config import ConfigError, load_file, resolve
    from launch.user_modules import config_root, put_on_import_path

    if path:
        put_on_import_path(config_root(path))
    try:
        return resolve(load_file(path) if path else {}, overrides)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def load_checked_run_config(path: Path | None, overrides: dict, *, cluster: bool = False):
    """:func:`load_run_config`, its environment made once here, and every role's settings
    checked by the roles' own checks (``launch.preflight``): what starts a run
    (``apex train``, ``apex slurm submit``) fails with a usage error, before it makes a
    run directory, when any role would refuse to start.

    Args:
        cluster: the run is for Slurm (devices are the nodes', not this machine's).

    Raises:
        click.UsageError: the config's problems, or why the env cannot be made.
    """
    from apex.algorithms.registry import check_env, network_problems
    from apex.envs.families import EnvUnavailable
    from launch import builder
    from launch.preflight import cluster_run_problems, local_run_problems
    from replay.errors import ConfigError

    config = load_run_config(path, overrides)
    try:
        shape = check_env(config.env, config.algorithm)
    except EnvUnavailable as exc:
        raise click.UsageError(str(exc)) from exc
    check = cluster_run_problems if cluster else local_run_problems
    problems = check(config, builder.transition_spec(config, shape))
    problems += network_problems(config.learner, shape) if not problems else []
    if problems:
        raise click.UsageError(str(ConfigError(problems)))
    return config


def new_run_dir(env: str) -> Path:
    """``runs/ENV-YYYYmmdd-HHMMSS``."""
    import time

    name = env.replace("/", "_").replace(":", "_")  # an id may be package.module:Env-v0
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
