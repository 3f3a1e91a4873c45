"""The batch script of a run, rendered from its resolved config (see slurm/README.md).

Two layouts:

* ``hetjob``: three components (learner; shards; actors), each with its own resources,
  so only the learner asks for GPUs. One ``srun`` per component.
* ``multi-prog``: one homogeneous allocation and one ``srun --multi-prog`` step; rank 0 is
  the learner, then the shards, then the actors. For clusters without heterogeneous jobs.

Either way every task runs ``apex slurm task ROLE --run-dir DIR`` and finds the others
from Slurm's environment (launch.slurm.layout). When the learner ends, its task cancels
the job's other steps with SIGTERM. Near the time limit Slurm sends USR1 to the batch
shell (``--signal=B:USR1@S``): the script stops every step with SIGTERM (the learner
writes a checkpoint), then requeues the job, whose next start resumes from it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from launch.config import RunConfig
from launch.run_files import MULTI_PROG_FILE
from launch.slurm.layout import multi_prog_ranks, task_count
from launch.slurm.node_setup import node_python, script_lines


def _job_options(config: RunConfig, run_dir: Path) -> list[str]:
    slurm = config.slurm
    options = [
        f"--job-name=apex-{config.env.replace('/', '_')}",
        f"--output={run_dir / 'slurm-%j.out'}",
        "--open-mode=append",
        "--requeue" if slurm.requeue else "--no-requeue",
    ]
    if slurm.signal_before_end_s > 0:
        options.append(f"--signal=B:USR1@{slurm.signal_before_end_s}")
    return options


def _placement_options(config: RunConfig) -> list[str]:
    slurm = config.slurm
    options = [f"--time={slurm.time}"]
    if slurm.partition:
        options.append(f"--partition={slurm.partition}")
    if slurm.account:
        options.append(f"--account={slurm.account}")
    return options


def _spread(tasks: int, nodes: int, cpus_per_task: int) -> list[str]:
    """sbatch options for ``tasks`` tasks spread evenly over ``nodes`` nodes."""
    return [
        f"--nodes={nodes}",
        f"--ntasks={tasks}",
        f"--ntasks-per-node={tasks // nodes}",
        f"--cpus-per-task={cpus_per_task}",
    ]


def _component(options: list[str]) -> list[str]:
    return [f"#SBATCH {option}" for option in options]


def _apex_command(config: RunConfig) -> str:
    return f"{shlex.quote(node_python(config))} -m launch"


def render(config: RunConfig, run_dir: Path) -> str:
    """The whole batch script. ``run_dir`` must be absolute (nodes share it)."""
    if not run_dir.is_absolute():
        raise ValueError(f"run directory {run_dir} must be absolute")
    slurm = config.slurm
    header = ["#!/bin/bash", f"# Made by `apex slurm submit` for {run_dir}; resubmit: sbatch $0"]
    header += _component(_job_options(config, run_dir))
    placement = _placement_options(config)
    if slurm.layout == "hetjob":
        header.append("# component 0: the learner")
        learner = ["--nodes=1", "--ntasks=1", f"--cpus-per-task={slurm.learner_cpus}"]
        if slurm.learner_gpus:
            learner.append(f"--gpus={slurm.learner_gpus}")
        header += _component(placement + learner + list(slurm.learner_options))
        header += ["#SBATCH hetjob", f"# component 1: {config.shards} replay shards"]
        shards = _spread(config.shards, slurm.shard_nodes, slurm.cpus_per_shard)
        header += _component(placement + shards + list(slurm.shard_options))
        header += ["#SBATCH hetjob", f"# component 2: {config.actors} actors"]
        actors = _spread(config.actors, slurm.actor_nodes, slurm.cpus_per_actor)
        header += _component(placement + actors + list(slurm.actor_options))
    else:
        tasks = task_count(config)
        nodes = slurm.actor_nodes
        whole = [
            f"--nodes={nodes}",
            f"--ntasks={tasks}",
            f"--cpus-per-task={max(slurm.cpus_per_actor, slurm.cpus_per_shard)}",
        ]
        if slurm.learner_gpus:
            whole.append(f"--gpus-per-node={slurm.learner_gpus}")
        header += _component(
            placement
            + whole
            + list(slurm.learner_options + slurm.shard_options + slurm.actor_options)
        )
    return "\n".join(header) + "\n" + _body(config, run_dir)


def _body(config: RunConfig, run_dir: Path) -> str:
    apex = _apex_command(config)
    quoted_dir = shlex.quote(str(run_dir))
    lines = [
        "",
        "set -u",
        f"RUN_DIR={quoted_dir}",
        f"APEX=({apex})",
        'cd "$RUN_DIR"',
    ]
    lines += script_lines(config)
    lines += [
        "export PYTHONUNBUFFERED=1",
        'echo "apex: job $SLURM_JOB_ID starts on $(hostname) at $(date -Is),'
        ' restart ${SLURM_RESTART_COUNT:-0}"',
        "requeue=0",
        "on_time_limit() {",
        '  echo "apex: the time limit is near: checkpoint, stop, '
        + ("requeue" if config.slurm.requeue else "end")
        + '"',
        "  requeue=" + ("1" if config.slurm.requeue else "0"),
        '  scancel --signal=TERM "$SLURM_JOB_ID"',
        "}",
        "trap on_time_limit USR1",
        "# --distribution=block: every task computes the same placement from Slurm's variables",
        "# --kill-on-bad-exit=0: a dead actor or shard does not end the run (the learner says so)",
    ]
    task = '"${{APEX[@]}}" slurm task {role} --run-dir "$RUN_DIR"'
    if config.slurm.layout == "hetjob":
        lines += [
            "srun --het-group=1 --distribution=block --kill-on-bad-exit=0 --label "
            + task.format(role="shard")
            + " &",
            "shards=$!",
            "srun --het-group=2 --distribution=block --kill-on-bad-exit=0 --label "
            + task.format(role="actor")
            + " &",
            "actors=$!",
            "srun --het-group=0 " + task.format(role="learner") + " &",
            "learner=$!",
        ]
        # Actors before shards: stopped at once, each actor waited its whole final flush
        # (5 s) for shards that had already written their last snapshot and gone. The TERM
        # goes to the actors' component (its tasks), not to its srun, which takes a TERM
        # as "kill the step" and ends the actors as killed, their last flush cut; a minute
        # at most, then everything is stopped.
        stop_actors_first = [
            'scancel --signal=TERM "${SLURM_JOB_ID}+2" 2>/dev/null',
            "for _ in $(seq 120); do",
            '  kill -0 "$actors" 2>/dev/null || break',
            "  sleep 0.5",
            "done",
        ]
        # Each component is a step of its own, and the job's exit was the learner's: a
        # shard that ended unclean (its last snapshot not written) or an actor task that
        # died went unseen, where one srun over every role (multi-prog) ends with its
        # worst task's code.
        other_steps = [
            "learner_code=$code",
            *_wait_step("shards", "shards_code"),
            *_wait_step("actors", "actors_code"),
            'if [ "$code" = 0 ]; then',
            '  [ "$shards_code" = 0 ] || code=$shards_code',
            '  [ "$actors_code" = 0 ] || code=$actors_code',
            "fi",
        ]
        codes = " (learner $learner_code, shards $shards_code, actors $actors_code)"
    else:
        ranks = multi_prog_ranks(config)
        conf_lines = []
        for role in ("learner", "shard", "actor"):
            first, count = ranks[role]
            span = str(first) if count == 1 else f"{first}-{first + count - 1}"
            conf_lines.append(f"{span} {apex} slurm task {role} --run-dir {quoted_dir}")
        conf = run_dir / MULTI_PROG_FILE
        lines += [
            f"cat > {shlex.quote(str(conf))} <<'MULTI_PROG'",
            *conf_lines,
            "MULTI_PROG",
            "srun --distribution=block --kill-on-bad-exit=0 --label --multi-prog "
            + shlex.quote(str(conf))
            + " &",
            "learner=$!",
        ]
        stop_actors_first, other_steps, codes = [], [], ""
    lines += [
        "# `wait` returns early when a trap runs: wait again while the learner lives.",
        *_wait_step("learner", "code"),
        *stop_actors_first,
        'scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null',
        *other_steps,
        "wait",
        'if [ "$requeue" = 1 ]; then',
        '  echo "apex: requeueing job $SLURM_JOB_ID"',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "  exit 0",
        "fi",
        f'echo "apex: job $SLURM_JOB_ID ends at $(date -Is) with exit code $code{codes}"',
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)


def _wait_step(step: str, code: str) -> list[str]:
    """Waits for the background step whose PID is in ``$step`` (again when a trap cut the
    wait short) and keeps its exit code in ``$code``."""
    return [
        "while :; do",
        f'  wait "${step}"; {code}=$?',
        f'  kill -0 "${step}" 2>/dev/null || break',
        "done",
    ]
