"""Each role as a process entry point: built by ``launch.builder``, announced, run.

``apex train`` starts these as child processes; on a cluster, Slurm starts them one by one.
Each prints one JSON line ``{"ready": {...}}`` once its sockets are bound, and the learner
prints ``{"outcome": {...}}`` when it ends.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from launch import builder
from launch.config import RunConfig, write_resolved
from launch.evaluator_process import EvaluatorProcess
from launch.run_files import CHECKPOINTS_DIR, CONFIG_FILE
from launch.supervision.signals import on_stop_signal
from replay.errors import ConfigError

if TYPE_CHECKING:
    from apex.acting.actor import Actor
    from apex.learning.evaluator import Evaluator
    from replay.server.shard import ShardServer

logger = logging.getLogger(__name__)

# Exit codes of the learner role (and of `apex train`).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ROLE_DIED = 3
# Learner outcomes that are a normal end of a run.
NORMAL_ENDS = ("solved", "max_updates", "max_time", "stopped")


def announce(kind: str, payload: dict) -> None:
    print(json.dumps({kind: payload}), flush=True)


def run_shard(server: ShardServer) -> int:
    """Serves a bound shard (``ShardServer(config)``, which refuses a bad config with a
    ``ConfigError`` before anything is bound) until SIGINT or SIGTERM."""
    on_stop_signal(server.stop)
    announce(
        "ready",
        {
            "insert": server.insert_endpoint,
            "request": server.request_endpoint,
            "shard": server.config.shard_index,
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
    require_checkpoint: bool = False,
) -> int:
    """Runs the learner role to its end; its exit code.

    Raises:
        ConfigError: a device, keys or bind this learner cannot use, or (with
            ``require_checkpoint``) no usable checkpoint to resume from.
    """
    # torch is imported here, not at the top: a shard process (and the supervisor) never
    # needs it, and its import costs a second of CPU while every role starts at once.
    from apex.algorithms.cpu_math import flush_denormals
    from apex.learning import checkpoint
    from apex.learning.learner import RUN_OVER

    flush_denormals()

    resume_from, refused = None, []
    if resume:
        resume_from, refused = checkpoint.latest_readable(run_dir / CHECKPOINTS_DIR)
    for reason in refused:
        logger.warning("--resume: checkpoint refused: %s", reason)
    if resume and resume_from is None:
        where = run_dir / CHECKPOINTS_DIR
        if require_checkpoint:
            reasons = "; ".join(refused) or "none written"
            raise ConfigError([f"--resume: no usable checkpoint in {where} ({reasons})"], "resume")
        logger.warning("--resume: no usable checkpoint in %s, starting fresh", where)
    learner = builder.learner(
        config, shard_requests, run_dir, resume_from, host, weights_port, episodes_port
    )
    if not (run_dir / CONFIG_FILE).exists():  # started by hand: the views read it
        write_resolved(config, run_dir)
    on_stop_signal(learner.stop)
    announce(
        "ready",
        {
            "weights": learner.weights_endpoint,
            "episodes": learner.episodes_endpoint,
            "resumed_from": str(resume_from) if resume_from else None,
        },
    )
    evaluator = None
    if config.learner.eval_every_steps:
        evaluator = EvaluatorProcess(
            config, run_dir, learner.weights_endpoint, learner.episodes_endpoint
        )
        evaluator.start()
        learner.companions.append(evaluator.health)
    try:
        outcome = learner.run()
        # Said before the evaluator stops (a second: its last results linger for a
        # learner that has closed), so that the supervisor stops the actors meanwhile.
        announce(
            "outcome",
            {
                "reason": outcome.reason,
                "solved": outcome.solved,
                "last_eval_return": outcome.last_eval_return,
                **dataclasses.asdict(outcome.counters),
                **(evaluator.health() if evaluator is not None else {}),
                "delivery": outcome.delivery,
            },
        )
    finally:
        if evaluator is not None:
            evaluator.stop()
    if outcome.reason in RUN_OVER:  # a stopped learner may be resumed against them
        stop_shards(shard_requests, config.security)
    return EXIT_OK if outcome.reason in NORMAL_ENDS else EXIT_FAILED


def stop_shards(requests: tuple[str, ...], security) -> None:
    """The run is over: its shards stop as on SIGTERM (their final snapshots), told on the
    channel the learner sampled them on. Roles started by hand on several hosts end with
    their learner this way; a launcher that stops them itself finds them stopping. A shard
    that does not answer is left to its launcher."""
    from launch.builder import LEARNER_SENDER
    from replay.errors import ReplayError
    from replay.protocol.requests import RequestClient
    from replay.wire.security import make_context

    context = make_context(security, need_server_secret=False)
    try:
        for endpoint in requests:
            client = RequestClient(context, endpoint, LEARNER_SENDER, timeout_s=2.0)
            try:
                client.stop()
            except ReplayError as exc:
                logger.warning("shard %s not told the run is over: %s", endpoint, exc)
            finally:
                client.close()
    finally:
        context.term()


def run_evaluator(evaluator: Evaluator) -> int:
    """Runs the evaluator built by ``launch.builder.evaluator`` until SIGINT/SIGTERM or its
    parent's end."""
    on_stop_signal(evaluator.stop)
    # Measured on a 2-core machine, evaluations of a slow env beside 16-64 actors took a
    # core from them: the evaluator takes what the run's roles leave.
    os.nice(evaluator.config.niceness)
    announce("ready", {"evaluator": evaluator.config.env})
    evaluator.run()
    return EXIT_OK


def run_actor(actor: Actor) -> int:
    """Runs an actor built by ``launch.builder.actor`` until SIGINT/SIGTERM or its step
    limit. Not apex.algorithms.cpu_math here: it imports torch, which a CartPole actor (numpy MLP)
    never needs, and 32 actors importing it at once on 2 cores delayed training by 20 s."""
    on_stop_signal(actor.stop)
    announce("ready", {"actor": actor.config.actor_index})
    actor.run()
    return EXIT_OK
