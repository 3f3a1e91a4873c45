"""``apex slurm``: submit a run as a Slurm batch job, follow it, and run its tasks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import click

from launch.options import (
    RUN_DIR,
    config_argument,
    load_checked_run_config,
    new_run_dir,
    run_dir_option,
    run_options,
    settings_option,
    stop_options,
)
from launch.run_files import CHECKPOINTS_DIR, CONFIG_FILE, JOB_FILE, JOB_ID_FILE


@click.group()
def slurm() -> None:
    """Run on a Slurm cluster (see slurm/README.md)."""


@slurm.command("submit")
@config_argument
@run_options
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Nodes for the actors.")
@click.option(
    "--actors-per-node", type=click.IntRange(min=1), default=None, help="Actor tasks per node."
)
@click.option("--shards", type=click.IntRange(min=1), default=None, help="Replay shards.")
@click.option(
    "--shard-nodes", type=click.IntRange(min=1), default=None, help="Nodes for the shards."
)
@click.option("--partition", default=None, help="Slurm partition.")
@click.option("--account", default=None, help="Slurm account.")
@click.option(
    "--gpus", type=click.IntRange(min=0), default=None, help="GPUs for the learner (0: CPU)."
)
@click.option("--time", "time_limit", default=None, help="Time limit, e.g. 04:00:00.")
@click.option(
    "--layout", type=click.Choice(["hetjob", "multi-prog"]), default=None, help="Job layout."
)
@stop_options
@run_dir_option(
    required=False, help_text="Run directory on a filesystem every node sees [runs/ENV-TIME]."
)
@settings_option
@click.option("--dry-run", is_flag=True, help="Print the batch script; submit nothing.")
def submit(
    config_path,
    env,
    seed,
    nodes,
    actors_per_node,
    shards,
    shard_nodes,
    partition,
    account,
    gpus,
    time_limit,
    layout,
    max_updates,
    max_time,
    target_return,
    run_dir,
    settings,
    dry_run,
) -> None:
    """Render the batch script from the same config `apex train` uses, and sbatch it."""
    from launch import builder
    from launch.config import load_file, write_resolved
    from launch.overrides import run_overrides
    from launch.run_keys import with_run_keys
    from launch.slurm.node_setup import plan_lines
    from launch.slurm.script import render

    overrides = run_overrides(
        env=env,
        shards=shards,
        seed=seed,
        target_return=target_return,
        max_updates=max_updates,
        max_time=max_time,
        settings=settings,
    )
    cluster = {
        key: value
        for key, value in (
            ("actor_nodes", nodes),
            ("shard_nodes", shard_nodes),
            ("partition", partition),
            ("account", account),
            ("learner_gpus", gpus),
            ("time", time_limit),
            ("layout", layout),
        )
        if value is not None
    }
    overrides["slurm"] = {**overrides.get("slurm", {}), **cluster}
    if actors_per_node is not None:
        file_nodes = load_file(config_path).get("slurm", {}) if config_path else {}
        node_count = nodes or file_nodes.get("actor_nodes", 1)
        overrides["actors"] = actors_per_node * node_count
    config = load_checked_run_config(config_path, overrides, cluster=True)
    run_dir = (run_dir or new_run_dir(config.env)).absolute()
    script = render(config, run_dir)
    for line in plan_lines(config, run_dir):  # beside the script, not in it
        click.echo(line, err=True)
    if dry_run:
        click.echo(script, nl=False)
        return
    if shutil.which("sbatch") is None:
        raise click.ClickException("sbatch is not on PATH: run this on a Slurm login node")
    if (run_dir / CONFIG_FILE).exists():
        raise click.ClickException(
            f"{run_dir} already holds a run; pick another --run-dir (a requeued job resumes "
            "by itself)"
        )
    created = not run_dir.exists()
    # Ports on compute nodes are open to every job on the cluster: the run gets keys.
    config = with_run_keys(config, run_dir, on_cluster=True)
    write_resolved(config, run_dir)
    builder.write_spec(run_dir, builder.transition_spec(config))
    job_path = run_dir / JOB_FILE
    job_path.write_text(script, encoding="utf-8")
    job_path.chmod(0o755)
    result = subprocess.run(
        ["sbatch", "--parsable", str(job_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        said = result.stderr.strip() or result.stdout.strip()
        if created:  # nothing was submitted: leave nothing behind that looks like a run
            shutil.rmtree(run_dir, ignore_errors=True)
            left = f"nothing was submitted; {run_dir}, made for it, was removed"
        else:
            left = f"nothing was submitted; the files written for it are in {run_dir}"
        raise click.ClickException(f"sbatch failed ({said}): {left}")
    job_id = result.stdout.strip().split(";")[0]
    (run_dir / JOB_ID_FILE).write_text(job_id + "\n", encoding="utf-8")
    click.echo(f"submitted job {job_id}")
    click.echo(f"run directory: {run_dir}")
    click.echo(f"follow it:     apex slurm status {run_dir}")
    click.echo(f"cancel it:     scancel {job_id}")


def job_state(job_id: str) -> dict[str, str]:
    """``JobState``, ``Restarts``, ``ExitCode`` and ``RunTime`` from scontrol, if it still
    knows the job (a het job prints its leader first; the leader's values are kept)."""
    if shutil.which("scontrol") is None:
        return {}
    result = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    fields: dict[str, str] = {}
    for line in result.stdout.splitlines():
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key in ("JobState", "Restarts", "ExitCode", "RunTime") and key not in fields:
                fields[key] = value
    return fields


@slurm.command("status")
@click.argument("run_dir", type=RUN_DIR)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def status_command(run_dir: Path, as_json: bool) -> None:
    """Slurm's view of a run's job, then the run's summary (as `apex status`)."""
    from launch.views.status import run_status, status_lines

    status = run_status(run_dir)
    id_path = run_dir / JOB_ID_FILE
    if id_path.exists():
        status["job_id"] = id_path.read_text(encoding="utf-8").strip()
        status["slurm"] = job_state(status["job_id"])
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    if "job_id" not in status:
        click.echo(f"slurm: {run_dir} holds no Slurm job id (a local run?)")
    else:
        slurm_state = status["slurm"]
        click.echo(
            f"slurm: job {status['job_id']} {slurm_state.get('JobState', 'unknown to Slurm')}"
            + (f", restarts {slurm_state['Restarts']}" if "Restarts" in slurm_state else "")
            + (f", run time {slurm_state['RunTime']}" if "RunTime" in slurm_state else "")
        )
    for line in status_lines(status):
        click.echo(line)


@slurm.command("task")
@click.argument("role", type=click.Choice(["learner", "shard", "actor"]))
@click.option(
    "--run-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="The run directory (config.json inside).",
)
@click.option("--kept", is_flag=True, hidden=True, help="Run as the task keeper's child.")
def task(role: str, run_dir: Path, kept: bool) -> None:
    """One task of a Slurm job: picks its place and its peers from Slurm's environment.

    The batch script made by `apex slurm submit` runs this; it is not meant for hand use."""
    if not kept:
        sys.exit(_keep(role, run_dir))
    from apex.learning import checkpoint
    from launch import builder, roles
    from launch.config import ConfigError, read_resolved
    from launch.slurm.layout import SlurmEnvironmentError, job_layout, role_index

    try:
        config = read_resolved(run_dir / CONFIG_FILE)
        layout = job_layout(config, os.environ)
        index = role_index(role, config, os.environ)
    except (ConfigError, SlurmEnvironmentError) as exc:
        raise click.ClickException(str(exc)) from exc
    slurm_settings = config.slurm
    if role == "shard":
        insert_port, request_port = layout.shard_ports[index]
        command = [
            sys.executable,
            "-m",
            "launch",
            "replay",
            "--config",
            str(run_dir / CONFIG_FILE),
            "--run-dir",
            str(run_dir),
            "--shard-index",
            str(index),
            "--host",
            "0.0.0.0",
            "--insert-port",
            str(insert_port),
            "--request-port",
            str(request_port),
        ]
        os.execv(sys.executable, command)  # the keeper's child is the shard itself
    if role == "actor":
        actor = builder.actor(config, index, layout.shards, layout.weights, layout.episodes)
        sys.exit(roles.run_actor(actor))
    resume = checkpoint.latest(run_dir / CHECKPOINTS_DIR) is not None
    code = roles.run_learner(
        config,
        tuple(s.request for s in layout.shards),
        run_dir,
        resume,
        "0.0.0.0",
        slurm_settings.weights_port,
        slurm_settings.episodes_port,
    )
    sys.exit(code)


def _keep(role: str, run_dir: Path) -> int:
    """The task's own process: runs the role as a child (``--kept``) and brings it back
    when it dies (``launch.slurm.keeper``), since Slurm restarts no task inside a running step.
    A shard comes back from its snapshot, a learner killed by a signal from its checkpoint,
    an actor that failed anew; when the learner ends for good, the task ends the job.
    This process imports nothing heavy: every task has one."""
    from launch.slurm.keeper import run_restarting
    from launch.supervision.restarts import LEARNER_RESTART_BUDGET, SHARD_RESTART_BUDGET

    command = [
        sys.executable,
        "-m",
        "launch",
        "slurm",
        "task",
        role,
        "--run-dir",
        str(run_dir),
        "--kept",
    ]
    what = f"{role} task {os.environ.get('SLURM_PROCID', '?')}"
    if role == "shard":
        budget = _restart_budget(run_dir / CONFIG_FILE, SHARD_RESTART_BUDGET)
        return run_restarting(command, what, budget)
    if role == "actor":
        return run_restarting(command, what, sys.maxsize, restart_if=lambda code: code != 0)
    code = run_restarting(command, "learner", LEARNER_RESTART_BUDGET, restart_if=killed)
    # The learner's records are complete: the curves are drawn while the shards and the
    # actors stop, not before they are told to (seconds of a whole job's cores).
    drawing = _start_drawing_curves(run_dir)
    _end_job()
    if drawing is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            drawing.wait(timeout=120)
        if drawing.poll() is None:
            drawing.kill()
            drawing.wait()
    return code


def _start_drawing_curves(run_dir: Path) -> subprocess.Popen | None:
    """``curves.png`` in the run directory, drawn by a child (this keeper stays light);
    a failure is the child's to log, and never the run's outcome. The child ignores the
    TERM that ends the job (``_end_job``): an ignored signal stays ignored across exec."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "launch", "plot", str(run_dir)], stdout=subprocess.DEVNULL
        )
    except OSError:
        return None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _restart_budget(config_path: Path, default: int) -> int:
    """``replay.restart_budget`` of the resolved config (checked when it was written),
    read without the config module's imports; the default if it cannot be read (the
    child then says what is wrong with the file)."""
    try:
        budget = json.loads(config_path.read_text())["replay"]["restart_budget"]
    except (OSError, ValueError, KeyError, TypeError):
        return default
    return budget if isinstance(budget, int) and budget >= 0 else default


def killed(code: int) -> bool:
    """A role's exit code says a signal killed it."""
    return code < 0


def _end_job() -> None:
    """The learner decides when the run ends: stops the job's other steps (shards, actors).
    The signal reaches this step too; its work is done, so it must not turn a finished
    run into one "Terminated" by SIGTERM (exit 143, the job FAILED: seen in a test)."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id and shutil.which("scancel"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.run(
            ["scancel", "--signal=TERM", job_id], timeout=30, check=False, capture_output=True
        )
