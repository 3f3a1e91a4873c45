"""Where each role of a Slurm job runs and listens, worked out from Slurm's own environment.

Every task runs ``apex slurm task ROLE --run-dir DIR``. From the run's config and the
variables Slurm sets (node lists, tasks per node, ``SLURM_PROCID``) each task computes the
same table: the learner's host, and every shard's host and ports. Nobody writes host lists
and nothing is exchanged at start-up, so a requeued job or a restarted task finds the others
the same way.

Placement follows Slurm's block distribution, which the batch script asks for explicitly:
tasks fill the first node of their allocation, then the next. Ports are fixed per role:
a shard with local slot ``k`` on its node binds ``shard_port_base + 2k`` (inserts) and
``+ 1`` (requests), so several shards on one node never collide.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from launch.config import RunConfig
from replay.inserts.endpoints import ShardEndpoints

ROLES = ("learner", "shard", "actor")
# Het-job component of each role, in the order the batch script declares them.
HET_GROUP = {"learner": 0, "shard": 1, "actor": 2}


class SlurmEnvironmentError(RuntimeError):
    """The task does not run inside the Slurm job layout it expects."""


@dataclass(frozen=True)
class TaskSlot:
    host: str
    local_slot: int


@dataclass(frozen=True)
class JobLayout:
    """Every endpoint of a run, as every task of the job computes it."""

    learner_host: str
    weights: str
    episodes: str
    shards: tuple[ShardEndpoints, ...]
    shard_hosts: tuple[str, ...]
    shard_ports: tuple[tuple[int, int], ...]


_TASKS_PER_NODE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def parse_tasks_per_node(text: str) -> list[int]:
    """``"2(x3),1"`` → ``[2, 2, 2, 1]`` (Slurm's SLURM_TASKS_PER_NODE format)."""
    counts: list[int] = []
    for part in text.split(","):
        match = _TASKS_PER_NODE.match(part.strip())
        if match is None:
            raise SlurmEnvironmentError(f"cannot read tasks per node {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def block_placement(hosts: list[str], tasks_per_node: list[int]) -> list[TaskSlot]:
    """Task ``i``'s host and its slot among the tasks on that host, in block order."""
    if len(hosts) != len(tasks_per_node):
        raise SlurmEnvironmentError(
            f"{len(hosts)} hosts but tasks per node lists {len(tasks_per_node)} nodes"
        )
    return [
        TaskSlot(host, slot)
        for host, count in zip(hosts, tasks_per_node, strict=True)
        for slot in range(count)
    ]


def scontrol_hostnames(nodelist: str) -> list[str]:
    """Expands a Slurm node list (``node[01-03],gpu7``) the way Slurm does."""
    result = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if result.returncode != 0:
        raise SlurmEnvironmentError(
            f"scontrol show hostnames {nodelist!r} failed: {result.stderr.strip()}"
        )
    return result.stdout.split()


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if not value:
        raise SlurmEnvironmentError(
            f"{name} is not set: run this inside the job that `apex slurm submit` made"
        )
    return value


def role_placement(
    role: str,
    config: RunConfig,
    env: Mapping[str, str],
    hostnames: Callable[[str], list[str]] = scontrol_hostnames,
) -> list[TaskSlot]:
    """Where every task of ``role`` runs, indexed by the role's own task index."""
    if config.slurm.layout == "hetjob":
        group = HET_GROUP[role]
        hosts = hostnames(_required(env, f"SLURM_JOB_NODELIST_HET_GROUP_{group}"))
        counts = parse_tasks_per_node(_required(env, f"SLURM_TASKS_PER_NODE_HET_GROUP_{group}"))
        return block_placement(hosts, counts)
    # One step holds every task: its own variables say where srun put them.
    hosts = hostnames(_required(env, "SLURM_STEP_NODELIST"))
    everyone = block_placement(
        hosts, parse_tasks_per_node(_required(env, "SLURM_STEP_TASKS_PER_NODE"))
    )
    first, count = multi_prog_ranks(config)[role]
    if len(everyone) < task_count(config):
        raise SlurmEnvironmentError(
            f"the allocation has {len(everyone)} tasks but the run needs {task_count(config)}"
        )
    return everyone[first : first + count]


def multi_prog_ranks(config: RunConfig) -> dict[str, tuple[int, int]]:
    """First rank and task count of each role in the one-step (multi-prog) layout."""
    return {
        "learner": (0, 1),
        "shard": (1, config.shards),
        "actor": (1 + config.shards, config.actors),
    }


def task_count(config: RunConfig) -> int:
    return 1 + config.shards + config.actors


def job_layout(
    config: RunConfig,
    env: Mapping[str, str],
    hostnames: Callable[[str], list[str]] = scontrol_hostnames,
) -> JobLayout:
    slurm = config.slurm
    learner = role_placement("learner", config, env, hostnames)[0]
    shard_slots = role_placement("shard", config, env, hostnames)
    if len(shard_slots) < config.shards:
        raise SlurmEnvironmentError(
            f"the job places {len(shard_slots)} shard tasks but the run has {config.shards}"
        )
    ports = tuple(
        (slurm.shard_port_base + 2 * s.local_slot, slurm.shard_port_base + 2 * s.local_slot + 1)
        for s in shard_slots[: config.shards]
    )
    hosts = tuple(s.host for s in shard_slots[: config.shards])
    return JobLayout(
        learner_host=learner.host,
        weights=f"tcp://{learner.host}:{slurm.weights_port}",
        episodes=f"tcp://{learner.host}:{slurm.episodes_port}",
        shards=tuple(
            ShardEndpoints(f"tcp://{host}:{insert}", f"tcp://{host}:{request}")
            for host, (insert, request) in zip(hosts, ports, strict=True)
        ),
        shard_hosts=hosts,
        shard_ports=ports,
    )


def role_index(role: str, config: RunConfig, env: Mapping[str, str]) -> int:
    """This task's index within its role (shard 0.., actor 0..)."""
    rank = int(_required(env, "SLURM_PROCID"))
    if config.slurm.layout == "hetjob":
        # One srun per component: ranks start at 0 in each.
        return rank
    first, count = multi_prog_ranks(config)[role]
    if not first <= rank < first + count:
        raise SlurmEnvironmentError(f"rank {rank} is not a {role} task in this layout")
    return rank - first
