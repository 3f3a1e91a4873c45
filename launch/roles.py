"""Each role as a process entry point, built from the run's resolved config.

``apex train`` starts these as child processes; on a cluster, Slurm starts them one by one.
Each prints one JSON line ``{"ready": {...}}`` once its sockets are bound, and the learner
prints ``{"outcome": {...}}`` when it ends.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from apex.envs import env_shape
from launch.config import RunConfig
from launch.signals import on_stop_signal
from replay.client import ShardEndpoints
from replay.shard import ShardConfig, ShardServer

logger = logging.getLogger(__name__)

# Exit codes of the learner role (and of `apex train`).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ROLE_DIED = 3


def announce(kind: str, payload: dict) -> None:
    print(json.dumps({kind: payload}), flush=True)


def shard_config_from_run(
    config: RunConfig, index: int, host: str, insert_port: int = 0, request_port: int = 0
) -> ShardConfig:
    replay = config.replay.shard_share(config.shards)
    return ShardConfig(
        spec=env_shape(config.env).transition_spec(),
        capacity=replay.capacity,
        alpha=replay.alpha,
        min_size_to_sample=replay.min_size,
        samples_per_insert=replay.samples_per_insert,
        error_buffer=replay.error_buffer,
        host=host,
        insert_port=insert_port,
        request_port=request_port,
        shard_index=index,
        seed=config.seed + 100 * (index + 1),
        insert_batch_hint=config.actor.insert_batch,
    )


def run_shard(shard: ShardConfig) -> int:
    server = ShardServer(shard)
    on_stop_signal(server.stop)
    announce(
        "ready",
        {
            "insert": server.insert_endpoint,
            "request": server.request_endpoint,
            "shard": shard.shard_index,
        },
    )
    server.serve()
    return EXIT_OK


def run_learner(
    config: RunConfig,
    shard_requests: tuple[str, ...],
    run_dir: Path,
    resume: bool,
    host: str,
    weights_port: int = 0,
    episodes_port: int = 0,
) -> int:
    # torch is imported here, not at the top: a shard process (and the supervisor) never
    # needs it, and its import costs a second of CPU while every role starts at once.
    from apex import checkpoint
    from apex.cpu_math import flush_denormals
    from apex.learner import Learner

    flush_denormals()

    resume_from = checkpoint.latest(run_dir / "checkpoints") if resume else None
    if resume and resume_from is None:
        logger.warning("--resume: no checkpoint in %s, starting fresh", run_dir / "checkpoints")
    learner = Learner(
        config.learner,
        shard_requests,
        run_dir,
        config.to_dict(),
        host=host,
        weights_port=weights_port,
        episodes_port=episodes_port,
        resume_from=resume_from,
    )
    on_stop_signal(learner.stop)
    announce(
        "ready",
        {
            "weights": learner.weights_endpoint,
            "episodes": learner.episodes_endpoint,
            "resumed_from": str(resume_from) if resume_from else None,
        },
    )
    outcome = learner.run()
    announce(
        "outcome",
        {
            "reason": outcome.reason,
            "solved": outcome.solved,
            "last_eval_return": outcome.last_eval_return,
            **dataclasses.asdict(outcome.counters),
            "delivery": outcome.delivery,
        },
    )
    return (
        EXIT_OK
        if outcome.reason in ("solved", "max_updates", "max_time", "stopped")
        else EXIT_FAILED
    )


def run_actor(
    config: RunConfig,
    index: int,
    shards: tuple[ShardEndpoints, ...],
    weights: str,
    episodes: str,
    max_steps: int | None = None,
) -> int:
    # Not apex.cpu_math: it imports torch, which a CartPole actor (numpy MLP) never needs,
    # and 32 actors importing it at once on 2 cores delayed training by 20 s.
    from apex.actor import Actor, ActorEndpoints

    actor_config = config.actor_config(index)
    if max_steps is not None:
        actor_config = dataclasses.replace(actor_config, max_steps=max_steps)
    actor = Actor(actor_config, ActorEndpoints(shards, weights, episodes))
    on_stop_signal(actor.stop)
    announce("ready", {"actor": index})
    actor.run()
    return EXIT_OK
