"""The role commands: ``apex replay``, ``apex learner``, ``apex actor``, and ``apex train``
(all of them as child processes on this machine)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from launch.options import (
    RUN_DIR,
    FieldParam,
    config_argument,
    config_option,
    load_checked_run_config,
    load_run_config,
    new_run_dir,
    run_dir_option,
    run_options,
    security_options,
    security_overrides,
    settings_option,
    shards_option,
    stop_options,
)
from launch.run_files import CONFIG_FILE
from replay.errors import ConfigError
from replay.server.config import DEFAULT_CAPACITY

SMALL_FIELDS = (
    "obs:4:float32",
    "action::int64",
    "reward::float32",
    "discount::float32",
    "next_obs:4:float32",
)


def _port_option(name: str, help_text: str):
    return click.option(name, type=click.IntRange(0, 65535), default=0, help=help_text)


def _directory_option(*names: str, help_text: str):
    """An optional directory (need not exist yet)."""
    path = click.Path(file_okay=False, path_type=Path)
    return click.option(*names, type=path, default=None, help=help_text)


def _learner_endpoints(command):
    """``--weights`` and ``--episodes``: the learner's endpoints, for whoever connects."""
    command = click.option(
        "--episodes", required=True, help="The learner's episodes endpoint (tcp://HOST:PORT)."
    )(command)
    return click.option(
        "--weights", required=True, help="The learner's weights endpoint (tcp://HOST:PORT)."
    )(command)


@click.command("replay")
@click.option(
    "--field",
    "fields",
    multiple=True,
    type=FieldParam(),
    default=SMALL_FIELDS,
    help="A stored field, repeated once per field.",
)
@click.option(
    "--capacity", type=click.IntRange(min=1), default=DEFAULT_CAPACITY, help="Transitions kept."
)
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
@_port_option("--insert-port", "PULL port (0: free port).")
@_port_option("--request-port", "ROUTER port (0: free port).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A run's config (TOML or resolved JSON): fields and replay settings come from it "
    "(the fields from spec.json beside it, where the run saved one).",
)
@click.option("--shard-index", type=click.IntRange(min=0), default=0, help="This shard's index.")
@click.option("--seed", type=int, default=0, help="Seed of the sampling generator.")
@click.option(
    "--frames/--whole",
    default=False,
    help="Keep each frame of obs/next_obs image stacks once (writers send INSERT_FRAMES).",
)
@click.option(
    "--compress-frames/--raw-frames", default=True, help="Keep those frames LZ4-compressed."
)
@click.option(
    "--queue",
    is_flag=True,
    help="Queue mode (IMPALA's unrolls): each item handed out once, oldest first; no priorities.",
)
@click.option(
    "--replay-share",
    type=click.FloatRange(min=0, max=1, max_open=True),
    default=0.0,
    help="With --queue: the share of each batch replayed from unrolls handed out before "
    "(IMPALA's experience replay).",
)
@_directory_option(
    "--snapshot-dir",
    help_text="Write snapshots of the whole shard here: every --snapshot-interval, on "
    "request, and on SIGTERM/SIGINT.",
)
@click.option(
    "--snapshot-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds between background snapshots (forked, the shard keeps serving).",
)
@_directory_option(
    "--restore",
    "restore_dir",
    help_text="Start from the newest usable snapshot in this directory (and keep writing "
    "snapshots there); empty if it has none.",
)
@_directory_option(
    "--run-dir",
    help_text="With --config: the run's directory; the shard snapshots into RUN_DIR/"
    "replay/shard-N on the run's replay.snapshot_interval_s and starts from the newest there.",
)
@security_options
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
    frames,
    compress_frames,
    queue,
    replay_share,
    snapshot_dir,
    snapshot_interval,
    restore_dir,
    run_dir,
    keys,
    insecure,
) -> None:
    """Run one replay shard until SIGINT or SIGTERM.

    Prints one JSON line with its endpoints once bound (``{"ready": ...}``)."""
    from launch import builder, roles
    from replay.frames.spec import FrameStackSpec
    from replay.server.config import ShardConfig
    from replay.server.shard import ShardServer
    from replay.store.spec import TransitionSpec
    from replay.wire.security import SecurityConfig

    try:
        if config_path is not None:
            run = load_run_config(config_path, security_overrides(keys, insecure))
            spec = builder.read_spec(config_path.parent)
            config = builder.shard_config(
                run, shard_index, host, insert_port, request_port, spec, run_dir=run_dir
            )
        else:
            spec = TransitionSpec(fields)
            layout = FrameStackSpec.from_transition_spec(spec) if frames else None
            if frames and layout is None:
                raise click.BadParameter(
                    "--frames needs obs and next_obs fields that are stacks of images",
                    param_hint="--frames",
                )
            config = ShardConfig(
                spec=spec,
                capacity=capacity,
                alpha=alpha,
                min_size=min_size,
                samples_per_insert=samples_per_insert,
                error_buffer=error_buffer,
                host=host,
                insert_port=insert_port,
                request_port=request_port,
                shard_index=shard_index,
                seed=seed,
                frames=layout,
                compress_frames=compress_frames,
                queue=queue,
                replay_share=replay_share,
                security=SecurityConfig(str(keys) if keys else None, insecure),
            )
        if run_dir is not None and config_path is None:
            raise click.BadParameter("needs --config", param_hint="--run-dir")
        if restore_dir is not None and snapshot_dir not in (None, restore_dir):
            raise click.BadParameter(
                "--restore DIR also names where snapshots go: give one directory",
                param_hint="--snapshot-dir",
            )
        snapshot_dir = restore_dir or snapshot_dir or config.snapshot_dir
        config = replace(
            config,
            snapshot_dir=str(snapshot_dir) if snapshot_dir else None,
            snapshot_interval_s=snapshot_interval or config.snapshot_interval_s,
            restore=restore_dir is not None or config.restore,
        )
        if config.snapshot_interval_s and config.snapshot_dir is None:
            raise click.BadParameter("needs --snapshot-dir", param_hint="--snapshot-interval")
        server = ShardServer(config)
    except ValueError as exc:  # ConfigError included
        raise click.UsageError(str(exc)) from exc
    sys.exit(roles.run_shard(server))


@click.command("learner")
@config_option
@shards_option
@run_dir_option(required=True, help_text="Run directory.")
@click.option(
    "--resume",
    is_flag=True,
    help="Continue from the newest checkpoint in --run-dir; refused (exit 2) if it has none "
    "usable.",
)
@click.option(
    "--resume-if-any",
    is_flag=True,
    help="As --resume, but start fresh when there is no usable checkpoint (how the "
    "supervisor restarts a learner that may have died before its first one).",
)
@click.option(
    "--host", default="127.0.0.1", help="Address to bind the weights and episodes sockets."
)
@_port_option("--weights-port", "PUB port (0: free).")
@_port_option("--episodes-port", "PULL port (0: free).")
@security_options
def learner_role(
    config_path,
    shards,
    run_dir,
    resume,
    resume_if_any,
    host,
    weights_port,
    episodes_port,
    keys,
    insecure,
) -> None:
    """Run the learner until solved, a limit, or SIGINT/SIGTERM (final checkpoint)."""
    from launch import roles

    run = load_run_config(config_path, security_overrides(keys, insecure))
    requests = tuple(s.request for s in shards)
    try:
        code = roles.run_learner(
            run,
            requests,
            run_dir,
            resume or resume_if_any,
            host,
            weights_port,
            episodes_port,
            require_checkpoint=resume,
        )
    except ConfigError as exc:  # keys, an exposed bind without keys, a device, a checkpoint
        raise click.UsageError(str(exc)) from exc
    sys.exit(code)


@click.command("actor")
@config_option
@click.option("--index", type=click.IntRange(min=0), required=True, help="This actor's index.")
@shards_option
@_learner_endpoints
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many vector steps.",
)
@security_options
def actor_role(config_path, index, shards, weights, episodes, max_steps, keys, insecure) -> None:
    """Run one actor until SIGINT/SIGTERM."""
    from launch import builder, roles

    run = load_run_config(config_path, security_overrides(keys, insecure))
    if index >= run.actors:
        raise click.BadParameter(
            f"index {index} but the config has {run.actors} actors", param_hint="--index"
        )
    try:
        actor = builder.actor(run, index, tuple(shards), weights, episodes, max_steps)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    sys.exit(roles.run_actor(actor))


@click.command("evaluator")
@config_option
@_learner_endpoints
@click.option(
    "--parent",
    type=click.IntRange(min=1),
    default=None,
    help="Stop once the process with this id (the learner's role) is gone.",
)
@click.option(
    "--keep-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the weights of the best evaluation and of the confirmed solve here.",
)
@security_options
def evaluator_role(config_path, weights, episodes, parent, keep_dir, keys, insecure) -> None:
    """Run the greedy evaluator on the learner's published weights until SIGINT/SIGTERM.
    The learner's role starts one by itself."""
    from launch import builder, roles

    run = load_run_config(config_path, security_overrides(keys, insecure))
    if not run.learner.eval_every_steps:
        raise click.UsageError("learner.eval_every_steps is 0: this run evaluates nothing")
    evaluator = builder.evaluator(run, weights, episodes, parent, keep_dir)
    sys.exit(roles.run_evaluator(evaluator))


@click.command("train")
@config_argument
@run_options
@click.option("--actors", type=click.IntRange(min=1), default=None, help="Actor processes.")
@click.option("--shards", type=click.IntRange(min=1), default=None, help="Replay shard processes.")
@click.option(
    "--envs-per-actor", type=click.IntRange(min=1), default=None, help="Environments per actor."
)
@click.option(
    "--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="Learner device."
)
@stop_options
@run_dir_option(required=False, help_text="Run directory [runs/ENV-TIME].")
@click.option(
    "--resume",
    "resume_dir",
    type=RUN_DIR,
    default=None,
    help="Continue the run in this directory from its newest checkpoint; --max-time and "
    "--max-updates then mean that much more.",
)
@settings_option
@security_options
@click.option(
    "--plain", is_flag=True, help="Progress as plain lines, even on a terminal (no live view)."
)
@click.option(
    "--curves/--no-curves",
    default=True,
    show_default=True,
    help="Draw curves.png at the end (about 2 s of CPU; a sweep of many runs may not want "
    "it: apex plot draws it later from metrics.jsonl).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Say which rule chose the run's defaults and what each setting it chose is, then "
    "stop (nothing is started).",
)
def train(
    config_path,
    env,
    seed,
    actors,
    shards,
    envs_per_actor,
    device,
    target_return,
    max_updates,
    max_time,
    run_dir,
    resume_dir,
    settings,
    keys,
    insecure,
    plain,
    curves,
    explain,
) -> None:
    """Train on this machine: shards, learner and actors as child processes.

    With no arguments it trains CartPole-v1 until solved (greedy mean ≥ 475 over 20
    episodes). On a terminal the progress is a status redrawn in place; elsewhere, a line
    every 5 s. The last lines name the run directory and what it holds."""
    from launch.config import load_file
    from launch.local.resume import TrainedSoFar
    from launch.local.supervisor import Supervisor
    from launch.overrides import merge_overrides, run_overrides
    from launch.run_keys import with_run_keys
    from launch.supervision.signals import on_stop_signal
    from launch.views.live_view import supervisor_views
    from launch.views.status import run_dir_contents
    from replay.wire.security import is_loopback

    so_far = TrainedSoFar.read(resume_dir) if resume_dir is not None else None
    if so_far is not None:  # on a resume the limits given here are more, not totals
        max_updates, max_time = so_far.more(max_updates, max_time)
    overrides = run_overrides(
        env=env,
        actors=actors,
        shards=shards,
        seed=seed,
        device=device,
        target_return=target_return,
        max_updates=max_updates,
        max_time=max_time,
        envs_per_actor=envs_per_actor,
        settings=settings,
    )
    overrides.update(security_overrides(keys, insecure))
    if resume_dir is not None:
        base = load_file(resume_dir / CONFIG_FILE)
        run_dir = resume_dir
        config = load_checked_run_config(None, merge_overrides(base, overrides))
        reached = so_far.limit_reached(config.learner.max_updates, config.learner.max_time_s)
        if reached:
            raise click.UsageError(f"--resume {resume_dir}: {reached}")
        click.echo(f"resuming {resume_dir} {so_far.describe()}")
    else:
        config = load_checked_run_config(config_path, overrides)
        if explain:
            from launch.explain import explain_lines

            click.echo("\n".join(explain_lines(config)))
            return
        run_dir = run_dir or new_run_dir(config.env)
        config = with_run_keys(config, run_dir)
    if config.security.insecure and not is_loopback(config.host):
        click.echo(
            f"WARNING: --insecure: the roles bind {config.host} without keys; anyone "
            "who reaches their ports can read and write this run",
            err=True,
        )
    live = sys.stdout.isatty() and not plain
    views = supervisor_views(live, curves)
    supervisor = Supervisor(config, run_dir, resume_dir is not None, click.echo, **views)
    on_stop_signal(supervisor.stop)
    summary = supervisor.run()
    click.echo(summary.line())
    click.echo(run_dir_contents(run_dir))
    sys.exit(summary.exit_code)
