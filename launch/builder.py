"""The one builder: a run config in, a shard, the learner or an actor out.

``apex train`` (through its child processes), the role commands (``apex replay``,
``apex learner``, ``apex actor``), the tasks of a Slurm job and the benchmarks all build
their parts here, so a part is made the same way wherever it runs.

The transition spec is computed once per run, by whoever writes the run directory, and
saved beside ``config.json`` as ``spec.json``: shards read it instead of building an
environment (an Atari env costs a second and a ROM load) only to learn its shapes.

torch is imported only where the learner or an image actor is built: a shard process and
the supervisor never pay its second-long import.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from apex.envs.families import EnvShape, env_shape, stacks_frames
from launch.config import ConfigError, RunConfig
from launch.run_files import SPEC_FILE
from replay.errors import InvalidBatchError
from replay.frames.spec import FrameStackSpec
from replay.inserts.endpoints import ShardEndpoints
from replay.server.config import ShardConfig
from replay.store.spec import TransitionSpec

if TYPE_CHECKING:
    from apex.acting.actor import Actor
    from apex.learning.evaluator import Evaluator
    from apex.learning.learner import Learner

# The learner's id on the shards' request sockets (actors use their index).
LEARNER_SENDER = 1_000_000
# The learner waits this long for the shards to hold data before it gives up.
LEARNER_START_TIMEOUT_S = 3600.0


def transition_spec(config: RunConfig, shape: EnvShape | None = None) -> TransitionSpec:
    """What the run's actors send and its shards keep: ``config.env``'s n-step transitions,
    or the algorithm's own items (IMPALA's unrolls). Without the env's ``shape``, builds
    the env once to learn it."""
    from apex.algorithms.registry import choose

    shape = shape if shape is not None else env_shape(config.env)
    builder = choose(config.algorithm, shape, config.env)
    return builder.transition_spec(shape, config.actor, config.algorithms[builder.name])


def write_spec(run_dir: Path, spec: TransitionSpec) -> Path:
    path = run_dir / SPEC_FILE
    temporary = path.with_suffix(".json.tmp")
    entries = {name: [list(shape), dtype] for name, (shape, dtype) in spec.to_dict().items()}
    temporary.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def read_spec(run_dir: Path) -> TransitionSpec | None:
    """The spec saved in ``run_dir``, or None if there is none.

    Raises:
        ConfigError: the file is there but is not a valid spec.
    """
    path = run_dir / SPEC_FILE
    if not path.exists():
        return None
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        return TransitionSpec.from_dict({n: (tuple(s), d) for n, (s, d) in entries.items()})
    except (OSError, ValueError, TypeError, AttributeError, InvalidBatchError) as exc:
        raise ConfigError([f"{path} is not a transition spec: {exc}"]) from exc


def shard_snapshot_dir(run_dir: Path, index: int) -> Path:
    """Where shard ``index`` of the run in ``run_dir`` keeps its snapshots."""
    return run_dir / "replay" / f"shard-{index}"


def shard_config(
    config: RunConfig,
    index: int,
    host: str,
    insert_port: int = 0,
    request_port: int = 0,
    spec: TransitionSpec | None = None,
    run_dir: Path | None = None,
) -> ShardConfig:
    """Shard ``index``'s settings: its share of the run's replay (``ReplayConfig``).

    Args:
        spec: the run's spec (see :func:`read_spec`); computed from the env if None.
        run_dir: the run's directory: the shard snapshots into
            :func:`shard_snapshot_dir` and starts from the newest snapshot there (a resumed
            or requeued run; a new run has none). None: no snapshots.
    """
    replay = config.replay.shard_share(config.shards)
    spec = spec if spec is not None else transition_spec(config)
    queue = config.queues
    frames = None
    if replay.frames or (replay.frames is None and stacks_frames(config.env)):
        frames = FrameStackSpec.from_transition_spec(spec)
    if replay.frames and frames is None:
        raise ConfigError(
            [f"replay.frames is on, but {config.env}'s observations are no image stack"]
        )
    snapshots = run_dir is not None and replay.snapshot_interval_s > 0
    return ShardConfig(
        spec=spec,
        frames=frames,
        compress_frames=replay.compress_frames,
        gather_threads=replay.gather_threads or None,
        snapshot_dir=str(shard_snapshot_dir(run_dir, index)) if snapshots else None,
        snapshot_interval_s=replay.snapshot_interval_s if snapshots else None,
        restore=snapshots,
        capacity=replay.capacity,
        alpha=replay.alpha,
        min_size=replay.min_size,
        # A queue's replay is its replay_share: each fresh item is taken once.
        samples_per_insert=None if queue else replay.samples_per_insert,
        error_buffer=0.0 if queue else replay.error_buffer,
        host=host,
        insert_port=insert_port,
        request_port=request_port,
        shard_index=index,
        seed=config.seed + 100 * (index + 1),
        # A queue takes a message only while the largest one fits: an actor sends once
        # insert_batch items are pending, and they come envs_per_actor at a time.
        insert_batch_hint=config.actor.insert_batch
        + (config.actor.envs_per_actor - 1 if queue else 0),
        queue=queue,
        replay_share=replay.replay_share,
        security=config.security,
    )


def learner(
    config: RunConfig,
    shard_requests: tuple[str, ...],
    run_dir: Path,
    resume_from: Path | None = None,
    host: str = "127.0.0.1",
    weights_port: int = 0,
    episodes_port: int = 0,
) -> Learner:
    """The learner: its algorithm, its sampler over ``shard_requests`` staging batches on
    its device, and its channels to the actors."""
    import torch

    from apex.algorithms.registry import build_algorithm, replay_items
    from apex.learning.learner import Learner
    from apex.learning.staging import DeviceStager, resolve_device, uses_io_thread
    from replay.sampling.pump import SamplerConfig
    from replay.sampling.sampler import make_sampler

    settings = config.learner
    torch.set_num_threads(settings.torch_threads)
    torch.manual_seed(settings.seed)
    device = resolve_device(settings.device)
    shape = env_shape(config.env)
    sampler_config = SamplerConfig(
        endpoints=shard_requests,
        batch_size=settings.batch_size,
        beta=settings.beta,
        prefetch=settings.prefetch,
        sender=LEARNER_SENDER,
        io_thread=uses_io_thread(settings.replay_io, device),
        start_timeout_s=LEARNER_START_TIMEOUT_S,
        security=config.security,
    )
    stager = DeviceStager(device)
    source = make_sampler(sampler_config, transition_spec(config, shape), stager, stager.arrays)
    return Learner(
        settings,
        build_algorithm(settings, config.algorithms, shape, device),
        source,
        device,
        run_dir,
        config.to_dict(),
        host=host,
        weights_port=weights_port,
        episodes_port=episodes_port,
        resume_from=resume_from,
        security=config.security,
        items=replay_items(config.algorithm),
    )


def actor(
    config: RunConfig,
    index: int,
    shards: tuple[ShardEndpoints, ...],
    weights: str,
    episodes: str,
    max_steps: int | None = None,
) -> Actor:
    """Actor ``index`` of the run: the acting policy of the run's algorithm, in the loop
    that every algorithm shares."""
    from apex.acting.actor import Actor, ActorEndpoints
    from apex.algorithms.registry import build_acting

    actor_config = config.actor_config(index)
    if max_steps is not None:
        actor_config = dataclasses.replace(actor_config, max_steps=max_steps)
    acting = build_acting(actor_config, config.algorithms, env_shape(config.env))
    return Actor(actor_config, acting, ActorEndpoints(shards, weights, episodes), config.security)


def evaluator(
    config: RunConfig,
    weights: str,
    episodes: str,
    parent_pid: int | None = None,
    keep_dir: Path | None = None,
) -> Evaluator:
    """The run's evaluator: the acting policy of the run's algorithm, played greedily on
    the weights the learner at ``weights`` publishes (``apex.learning.evaluator``),
    keeping the best and the solving weights in ``keep_dir``."""
    from apex.algorithms.registry import build_acting
    from apex.envs.families import solved_return
    from apex.learning.evaluator import Evaluator, EvaluatorConfig

    # The learned policy as it is: in float, whatever precision the actors act in.
    acting = dataclasses.replace(config.actor_config(0), acting_precision="float32")
    settings = config.learner
    shape = env_shape(config.env)
    policies = [
        build_acting(acting, config.algorithms, shape).policy for _ in range(settings.eval_lanes)
    ]
    evaluation = EvaluatorConfig(
        env=config.env,
        seed=settings.seed,
        every_steps=settings.eval_every_steps,
        episodes=settings.eval_episodes,
        confirm_episodes=settings.confirm_episodes,
        target_return=solved_return(config.env, settings.target_return),
        epsilon=settings.eval_epsilon,
        stepping=acting.env_stepping
        if settings.eval_stepping == "actors"
        else settings.eval_stepping,
        lanes=settings.eval_lanes,
        backlog=settings.eval_backlog,
        niceness=settings.eval_niceness,
        keep_dir=keep_dir,
        step_timeout_s=acting.step_timeout_s,
    )
    return Evaluator(evaluation, policies, weights, episodes, config.security, parent_pid)
