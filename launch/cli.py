"""The ``apex`` command: one click group with a subcommand per role or tool."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from launch.options import settings_option, stop_options


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
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A run's config (TOML or resolved JSON): fields and replay settings come from it.",
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
    config_path,
    shard_index,
    seed,
) -> None:
    """Run one replay shard until SIGINT or SIGTERM.

    Prints one JSON line with its endpoints once bound (``{"ready": ...}``)."""
    from launch import roles
    from replay.shard import ShardConfig
    from replay.spec import TransitionSpec

    try:
        if config_path is not None:
            run = _load_run_config(config_path, {})
            config = roles.shard_config_from_run(run, shard_index, host, insert_port, request_port)
        else:
            config = ShardConfig(
                spec=TransitionSpec(fields), capacity=capacity, alpha=alpha,
                min_size_to_sample=min_size, samples_per_insert=samples_per_insert,
                error_buffer=error_buffer, host=host, insert_port=insert_port,
                request_port=request_port, shard_index=shard_index, seed=seed,
            )  # fmt: skip
        problems = config.validate()
        if problems:
            raise click.UsageError("invalid shard config: " + "; ".join(problems))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    sys.exit(roles.run_shard(config))


def _load_run_config(path: Path | None, overrides: dict):
    from launch.config import ConfigError, load_file, resolve

    try:
        return resolve(load_file(path) if path else {}, overrides)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


class ShardParam(click.ParamType):
    """``INSERT_ENDPOINT,REQUEST_ENDPOINT`` of one shard."""

    name = "INSERT,REQUEST"

    def convert(self, value, param, ctx):
        from replay.client import ShardEndpoints

        if isinstance(value, ShardEndpoints):
            return value
        parts = value.split(",")
        if len(parts) != 2 or not all(p.startswith("tcp://") for p in parts):
            self.fail(f"{value!r} is not tcp://HOST:PORT,tcp://HOST:PORT", param, ctx)
        return ShardEndpoints(*parts)


def _config_option(command):
    return click.option(
        "--config",
        "config_path",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="Run config: a TOML file, or a run directory's config.json.",
    )(command)


def _shards_option(command):
    return click.option(
        "--shard",
        "shards",
        multiple=True,
        required=True,
        type=ShardParam(),
        help="Each shard's endpoints (repeat per shard).",
    )(command)


@main.command("learner")
@_config_option
@_shards_option
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Run directory.",
)
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in --run-dir.")
@click.option(
    "--host", default="127.0.0.1", help="Address to bind the weights and episodes sockets."
)
@click.option(
    "--weights-port", type=click.IntRange(0, 65535), default=0, help="PUB port (0: free)."
)
@click.option(
    "--episodes-port", type=click.IntRange(0, 65535), default=0, help="PULL port (0: free)."
)
def learner_role(config_path, shards, run_dir, resume, host, weights_port, episodes_port) -> None:
    """Run the learner until solved, a limit, or SIGINT/SIGTERM (final checkpoint)."""
    from launch import roles

    run = _load_run_config(config_path, {})
    requests = tuple(s.request for s in shards)
    sys.exit(roles.run_learner(run, requests, run_dir, resume, host, weights_port, episodes_port))


@main.command("actor")
@_config_option
@click.option("--index", type=click.IntRange(min=0), required=True, help="This actor's index.")
@_shards_option
@click.option("--weights", required=True, help="The learner's weights endpoint (tcp://HOST:PORT).")
@click.option(
    "--episodes", required=True, help="The learner's episodes endpoint (tcp://HOST:PORT)."
)
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many vector steps.",
)
def actor_role(config_path, index, shards, weights, episodes, max_steps) -> None:
    """Run one actor until SIGINT/SIGTERM."""
    from launch import roles

    run = _load_run_config(config_path, {})
    if index >= run.actors:
        raise click.BadParameter(
            f"index {index} but the config has {run.actors} actors", param_hint="--index"
        )
    sys.exit(roles.run_actor(run, index, tuple(shards), weights, episodes, max_steps))


@main.command("train")
@click.argument(
    "config_path", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--env", default=None, help="Environment preset or gymnasium id [CartPole-v1].")
@click.option("--actors", type=click.IntRange(min=1), default=None, help="Actor processes.")
@click.option("--shards", type=click.IntRange(min=1), default=None, help="Replay shard processes.")
@click.option(
    "--envs-per-actor", type=click.IntRange(min=1), default=None, help="Environments per actor."
)
@click.option("--seed", type=int, default=None, help="Root seed of the run.")
@click.option(
    "--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="Learner device."
)
@stop_options
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run directory [runs/ENV-TIME].",
)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Continue the run in this directory from its newest checkpoint.",
)
@settings_option
def train(
    config_path,
    env,
    actors,
    shards,
    envs_per_actor,
    seed,
    device,
    target_return,
    max_updates,
    max_time,
    run_dir,
    resume_dir,
    settings,
) -> None:
    """Train on this machine: shards, learner and actors as child processes.

    With no arguments it trains CartPole-v1 until solved (greedy mean ≥ 475 over 20
    episodes)."""
    import time as _time

    from launch.config import load_file
    from launch.signals import on_stop_signal
    from launch.supervisor import Supervisor

    overrides = run_overrides(
        env=env, actors=actors, shards=shards, seed=seed, device=device,
        target_return=target_return, max_updates=max_updates, max_time=max_time,
        envs_per_actor=envs_per_actor, settings=settings,
    )  # fmt: skip
    if resume_dir is not None:
        base = load_file(resume_dir / "config.json")
        run_dir = resume_dir
        config = _load_run_config(None, _merge_overrides(base, overrides))
    else:
        config = _load_run_config(config_path, overrides)
        run_dir = (
            run_dir
            or Path("runs") / f"{config.env.replace('/', '_')}-{_time.strftime('%Y%m%d-%H%M%S')}"
        )
    supervisor = Supervisor(config, run_dir, resume=resume_dir is not None, echo=click.echo)
    on_stop_signal(supervisor.stop)
    summary = supervisor.run()
    click.echo(summary.line())
    sys.exit(summary.exit_code)


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
    """The config overrides that ``apex train`` and ``apex slurm submit`` options make."""
    overrides: dict = {}
    for key, value in (("env", env), ("actors", actors), ("shards", shards), ("seed", seed)):
        if value is not None:
            overrides[key] = value
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
        _apply_setting(overrides, setting)
    return overrides


def _merge_overrides(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    return merged


def _apply_setting(overrides: dict, setting: str) -> None:
    import tomllib

    key, sep, text = setting.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) not in (1, 2) or not all(parts):
        raise click.BadParameter(f"{setting!r} is not SECTION.KEY=VALUE", param_hint="--set")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()  # a bare word: take it as a string
    if len(parts) == 1:
        overrides[parts[0]] = value
    else:
        overrides.setdefault(parts[0], {})[parts[1]] = value


from launch.bench_commands import bench  # noqa: E402  (registers after main exists)
from launch.slurm_commands import slurm  # noqa: E402

main.add_command(bench)
main.add_command(slurm)
