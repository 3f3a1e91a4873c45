"""Every role's configuration built before anything starts, and checked by the checks the
roles run at their own start: a run that a role would refuse is refused by ``apex train``
and ``apex slurm submit`` at once, with exit code 2 and no run directory.

The checks are the roles' own, not copies: each shard's ``ShardConfig.problems`` on the
share ``launch.builder.shard_config`` gives it, and the learner's ``device_problems`` for
a run on this machine (a cluster's nodes have their own devices: a CUDA learner there
needs ``slurm.learner_gpus``); and for a local run, the shards' memory at start against
what this machine has available. The settings' own checks (types, ranges, network sizes)
ran when the config was resolved (``launch.config``).
"""

from __future__ import annotations

import socket
from pathlib import Path

from launch import builder
from launch.config import RunConfig
from replay.errors import ConfigError
from replay.store.spec import TransitionSpec


def shard_problems(config: RunConfig, spec: TransitionSpec) -> list[str]:
    """Each shard's own checks on the settings it would start with (``spec``: the env's
    transitions, from the env the caller made); a problem that every shard has is named
    once."""
    found: dict[str, list[int]] = {}
    for index in range(config.shards):
        try:
            problems = builder.shard_config(config, index, config.host, spec=spec).problems()
        except ConfigError as exc:
            problems = exc.problems
        for problem in problems:
            found.setdefault(problem, []).append(index)
    return [
        problem if len(shards) == config.shards else f"shard {shards}: {problem}"
        for problem, shards in found.items()
    ]


def frame_problems(config: RunConfig) -> list[str]:
    """Frame storage asked for (``replay.frames = true``) on an env whose family does not
    stack frames: one env played a few steps must show stacks that share frames
    (``apex.acting.frame_check``), or the run would keep each observation's last slice."""
    from apex.acting.frame_check import NotFrameStacks, prove_frame_stacks
    from apex.envs.families import make_env, stacks_frames

    if not config.replay.frames or stacks_frames(config.env):
        return []
    try:
        prove_frame_stacks(lambda: make_env(config.env, training=True), config.env, config.seed)
    except NotFrameStacks as exc:
        return [str(exc)]
    return []


def available_memory_bytes() -> int | None:
    """This machine's MemAvailable (``/proc/meminfo``), or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_problems(
    config: RunConfig, spec: TransitionSpec, available: int | None = None
) -> list[str]:
    """Whether the shards of a run on this machine fit its available memory at start:
    each shard's store and priorities (``ShardConfig.planned_nbytes``), with the
    arithmetic, as a shard would otherwise die on its allocation or the machine swap."""
    available = available_memory_bytes() if available is None else available
    if available is None:
        return []
    shards = [builder.shard_config(config, i, config.host, spec=spec) for i in range(config.shards)]
    needed = sum(shard.planned_nbytes() for shard in shards)
    if needed <= available:
        return []
    slots = sum(shard.capacity for shard in shards)
    return [
        f"replay needs {needed / 2**30:,.1f} GiB at start ({config.shards} shard(s), "
        f"{slots:,} slots in all × {needed / slots:,.0f} bytes a slot, store and "
        f"priorities), but this machine has {available / 2**30:,.1f} GiB available: "
        "lower replay.capacity"
    ]


def host_problems(host: str) -> list[str]:
    """Whether the roles of a local run can bind ``host`` here (a mistyped address ends
    every role at its bind otherwise)."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.bind(address)
    except OSError as exc:
        return [f"host {host!r} cannot be bound on this machine: {exc.strerror or exc}"]
    return []


def local_run_problems(config: RunConfig, spec: TransitionSpec) -> list[str]:
    """What refuses a run of every role on this machine (``apex train``)."""
    problems = host_problems(config.host) + shard_problems(config, spec)
    problems += frame_problems(config) if not problems else []
    problems += memory_problems(config, spec) if not problems else []
    if config.learner.device not in ("auto", "cpu"):
        from apex.learning.staging import device_problems  # torch: only when a device is named

        problems += device_problems(config.learner.device)
    return problems


def cluster_run_problems(config: RunConfig, spec: TransitionSpec) -> list[str]:
    """What refuses a Slurm run (``apex slurm submit``)."""
    problems = shard_problems(config, spec)
    problems += frame_problems(config) if not problems else []
    if str(config.learner.device).startswith("cuda") and config.slurm.learner_gpus < 1:
        problems.append(
            f"learner.device {config.learner.device!r} needs slurm.learner_gpus >= 1, got "
            f"{config.slurm.learner_gpus}"
        )
    return problems
