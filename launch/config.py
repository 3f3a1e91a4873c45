"""One config for a run: a TOML file (optional) plus command-line overrides, resolved into
one frozen dataclass per role and validated once, with every problem reported together.

File layout (every key optional; defaults come from the environment preset)::

    env = "CartPole-v1"
    seed = 0
    actors = 2
    shards = 1

    [replay]        # ReplaySettings
    capacity = 100000

    [actor]         # apex.actor.ActorConfig (index and count are set per actor)
    envs_per_actor = 8

    [learner]       # apex.learner.LearnerConfig
    batch_size = 128

    [slurm]         # SlurmSettings: only `apex slurm submit` reads these
    partition = "gpu"

The resolved config is written to ``<run_dir>/config.json``; every role of the run reads
that file, so a local run and a Slurm run are built from the same values.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from apex.settings import ActorConfig, LearnerConfig


class ConfigError(ValueError):
    """Every problem found in a run config, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid run config:\n  - " + "\n  - ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ReplaySettings:
    """The run's whole replay; each of the run's S shards keeps a 1/S share of it.

    Totals, not per-shard figures, so that the learning dynamics do not change with the
    shard count: with per-shard buffers, four shards let actors run four times as far
    ahead of the learner before pushing back, and the learner trains on that stale data.

    Attributes:
        capacity: transitions kept in all.
        alpha: priority exponent.
        min_size: transitions stored in all before the learner samples.
        samples_per_insert: the replay ratio every shard holds (None: no limit).
        error_buffer: allowed deviation from ``samples_per_insert`` in all, in transitions.
    """

    capacity: int = 1_000_000
    alpha: float = 0.6
    min_size: int = 50_000
    samples_per_insert: float | None = None
    error_buffer: float = 0.0

    def shard_share(self, shards: int) -> ReplaySettings:
        """One shard's settings: totals divided over ``shards``, integers rounded up."""
        return replace(
            self,
            capacity=-(-self.capacity // shards),
            min_size=-(-self.min_size // shards),
            error_buffer=self.error_buffer / shards,
        )


@dataclass(frozen=True)
class SlurmSettings:
    """How ``apex slurm submit`` lays a run out on a cluster.

    Attributes:
        layout: ``hetjob`` (one component per role; only the learner asks for GPUs) or
            ``multi-prog`` (one homogeneous allocation, roles picked by task rank).
        partition, account: passed to sbatch when set.
        time: the job's time limit (sbatch ``--time``).
        learner_gpus: GPUs for the learner's component (its ``auto`` device then finds CUDA).
        learner_cpus, cpus_per_actor, cpus_per_shard: CPUs per task.
        actor_nodes: nodes the actors spread over (actors must divide evenly); in the
            multi-prog layout, the nodes of the whole allocation.
        shard_nodes: nodes the shards spread over (shards must divide evenly).
        signal_before_end_s: seconds before the time limit at which Slurm signals the job
            so the learner checkpoints and the job requeues itself.
        requeue: requeue on that signal (else just checkpoint and end).
        weights_port, episodes_port: the learner's ports on its node.
        shard_port_base: shard ``k`` on a node (k = 0, 1, ...) binds ``base + 2k`` for
            inserts and ``base + 2k + 1`` for requests.
        learner_options, shard_options, actor_options: extra ``#SBATCH`` options per
            component (e.g. ``--nodelist=...``, ``--constraint=...``).
        setup: shell lines run before any role starts (``module load``, ``source venv``).
        python: interpreter that runs ``apex`` on the nodes (default: the submitter's).
    """

    layout: str = "hetjob"
    partition: str | None = None
    account: str | None = None
    time: str = "01:00:00"
    learner_gpus: int = 0
    learner_cpus: int = 2
    cpus_per_actor: int = 1
    cpus_per_shard: int = 1
    actor_nodes: int = 1
    shard_nodes: int = 1
    signal_before_end_s: int = 120
    requeue: bool = True
    weights_port: int = 5550
    episodes_port: int = 5551
    shard_port_base: int = 5600
    learner_options: tuple[str, ...] = ()
    shard_options: tuple[str, ...] = ()
    actor_options: tuple[str, ...] = ()
    setup: str = ""
    python: str | None = None


SECTIONS = ("replay", "actor", "learner", "slurm")


@dataclass(frozen=True)
class RunConfig:
    """A whole run.

    Attributes:
        env: environment preset or gymnasium id.
        seed: root seed; each role derives its own.
        actors: actor processes.
        shards: replay shard processes.
        host: address every role binds and connects on in a local run.
        replay, actor, learner: per-role settings.
        slurm: cluster layout, read by ``apex slurm submit`` only.
    """

    env: str = "CartPole-v1"
    seed: int = 0
    actors: int = 2
    shards: int = 1
    host: str = "127.0.0.1"
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    actor: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)

    def actor_config(self, index: int) -> ActorConfig:
        return replace(self.actor, actor_index=index, actor_count=self.actors)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Defaults per environment, measured to learn quickly on a 2-core machine. Anything the
# user sets wins over these.
PRESET_DEFAULTS: dict[str, dict] = {
    "CartPole-v1": {
        # One actor of 8 envs, not two of 4: on 2 cores the learner is the limit, and a
        # second actor process takes CPU from it (210-230 against 240-330 updates/s).
        # Over 8 seeds each (`apex train --seed S`, wall clock): two actors of 4 envs,
        # n 3, base ε 0.1: median 29.3 s; n 5 and ε 0.2: 22.8 s; one actor of 8 envs,
        # n 5, ε 0.2: 14.8 s (8.7-19.4), against 17.1 s at ε 0.1 and 17.6 s at n 3.
        "actors": 1,
        "shards": 1,
        "replay": {
            "capacity": 100_000,
            "min_size": 2_000,
            # Two samples per insert and a 256-wide net solved in a median 22 s over 6
            # seeds, against 27 s at four samples and 37 s with a 128-wide net (ε 0.4).
            "samples_per_insert": 2.0,
            "error_buffer": 20_000.0,
        },
        # One actor explores at the base ε itself (Ape-X's ε_i with N = 1). 0.2 beat 0.1
        # above; Ape-X's 0.4 was the slowest base measured (33.8 s against 17 s for 0.1,
        # with two actors).
        "actor": {
            "envs_per_actor": 8,
            "n_step": 5,
            "weight_refresh_steps": 25,
            "hidden": [256, 256],
            "epsilon": 0.2,
        },
        "learner": {
            "batch_size": 64,
            "learning_rate": 2.3e-3,
            "adam_epsilon": 1e-8,
            "max_grad_norm": 10.0,
            "target_update_period": 128,
            "publish_period": 20,
            "eval_interval_s": 1.5,
            "hidden": [256, 256],
        },
    },
    "LunarLander-v3": {
        "replay": {
            "capacity": 500_000,
            "min_size": 10_000,
            "samples_per_insert": 8.0,
            "error_buffer": 50_000.0,
        },
        "actor": {"envs_per_actor": 8, "weight_refresh_steps": 50},
        "learner": {
            "batch_size": 256,
            "learning_rate": 5e-4,
            "target_update_period": 1000,
            "eval_interval_s": 30.0,
        },
    },
    "Pong": {
        "actors": 2,
        "replay": {"capacity": 200_000, "min_size": 20_000},
        "actor": {"envs_per_actor": 4, "weight_refresh_steps": 100},
        "learner": {
            "batch_size": 512,
            "learning_rate": 1e-4,
            "target_update_period": 2500,
            "eval_interval_s": 300.0,
            "eval_episodes": 5,
        },
    },
}


def _merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _build(cls, values: dict, section: str, problems: list[str]):
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            problems.append(
                f"{section}: unknown setting {key!r} (known: {', '.join(sorted(known))})"
            )
            continue
        kwargs[key] = tuple(value) if isinstance(value, list) else value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        problems.append(f"{section}: {exc}")
        return cls()


def load_file(path: Path) -> dict:
    """The raw values of a TOML (or resolved JSON) config file.

    Raises:
        ConfigError: a missing or unreadable file.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read config file {path}: {exc.strerror}"]) from exc
    try:
        return json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            [f"{path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}"]
        ) from exc


def resolve(file_values: dict | None = None, overrides: dict | None = None) -> RunConfig:
    """Preset defaults, then the file, then the overrides; validated.

    Raises:
        ConfigError: listing every problem found.
    """
    values = _merge(file_values or {}, overrides or {})
    env = values.get("env", RunConfig.env)
    values = _merge(PRESET_DEFAULTS.get(env, {}), values)
    problems: list[str] = []
    top_level = {f.name for f in fields(RunConfig)} - set(SECTIONS)
    for key in values:
        if key not in top_level | set(SECTIONS):
            problems.append(f"unknown top-level setting {key!r}")
    seed = values.get("seed", 0)
    replay = _build(ReplaySettings, values.get("replay", {}), "replay", problems)
    actor = _build(
        ActorConfig, {"env": env, "seed": seed, **values.get("actor", {})}, "actor", problems
    )
    learner = _build(
        LearnerConfig, {"env": env, "seed": seed, **values.get("learner", {})}, "learner", problems
    )
    slurm = _build(SlurmSettings, values.get("slurm", {}), "slurm", problems)
    config = RunConfig(
        replay=replay,
        actor=actor,
        learner=learner,
        slurm=slurm,
        **{k: v for k, v in values.items() if k in top_level},
    )
    problems += validate(config)
    if problems:
        raise ConfigError(problems)
    return config


def _not_positive_integers(named: dict[str, object]) -> list[str]:
    return [
        f"{name} must be a positive integer, got {value!r}"
        for name, value in named.items()
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0
    ]


REPLAY_IO_MODES = ("auto", "thread", "inline")


def validate(config: RunConfig) -> list[str]:
    """Every problem with ``config``, with the arithmetic where there is some."""
    problems = []
    positive = {
        "actors": config.actors,
        "shards": config.shards,
        "replay.capacity": config.replay.capacity,
        "replay.min_size": config.replay.min_size,
        "actor.envs_per_actor": config.actor.envs_per_actor,
        "actor.n_step": config.actor.n_step,
        "actor.insert_batch": config.actor.insert_batch,
        "actor.max_in_flight": config.actor.max_in_flight,
        "actor.weight_refresh_steps": config.actor.weight_refresh_steps,
        "learner.batch_size": config.learner.batch_size,
        "learner.target_update_period": config.learner.target_update_period,
        "learner.publish_period": config.learner.publish_period,
        "learner.prefetch": config.learner.prefetch,
        "learner.eval_episodes": config.learner.eval_episodes,
    }
    problems += _not_positive_integers(positive)
    if not 0.0 <= config.actor.gamma <= 1.0:
        problems.append(f"actor.gamma must be in [0, 1], got {config.actor.gamma}")
    if not 0.0 <= config.actor.epsilon <= 1.0:
        problems.append(f"actor.epsilon must be in [0, 1], got {config.actor.epsilon}")
    if not (math.isfinite(config.learner.learning_rate) and config.learner.learning_rate > 0):
        problems.append(f"learner.learning_rate must be > 0, got {config.learner.learning_rate}")
    if config.learner.device not in ("auto", "cpu", "cuda") and not str(
        config.learner.device
    ).startswith("cuda:"):
        problems.append(
            f"learner.device must be auto, cpu or cuda[:N], got {config.learner.device!r}"
        )
    if config.learner.replay_io not in REPLAY_IO_MODES:
        problems.append(
            f"learner.replay_io must be one of {', '.join(REPLAY_IO_MODES)}, "
            f"got {config.learner.replay_io!r}"
        )
    if tuple(config.actor.hidden) != tuple(config.learner.hidden):
        problems.append(
            f"actor.hidden {tuple(config.actor.hidden)} and learner.hidden "
            f"{tuple(config.learner.hidden)} differ: actors could not load the learner's weights"
        )
    replay = config.replay
    if (
        isinstance(replay.min_size, int)
        and isinstance(replay.capacity, int)
        and replay.min_size > replay.capacity
    ):
        problems.append(
            f"replay.min_size {replay.min_size} > replay.capacity {replay.capacity}: the "
            "replay never holds more than its capacity, so it would never sample"
        )
    numbers = (config.learner.batch_size, replay.min_size)
    # A first batch must not be asked of less data than itself.
    if all(isinstance(n, int) for n in numbers) and replay.min_size < config.learner.batch_size:
        problems.append(
            f"replay.min_size {replay.min_size} < learner.batch_size "
            f"{config.learner.batch_size}: raise replay.min_size"
        )
    if replay.samples_per_insert is not None and (
        replay.samples_per_insert <= 0 or replay.error_buffer < 0
    ):
        problems.append(
            f"replay.samples_per_insert must be > 0 and replay.error_buffer >= 0, got "
            f"{replay.samples_per_insert} and {replay.error_buffer}"
        )
    if config.learner.max_updates is not None and config.learner.max_updates <= 0:
        problems.append(f"learner.max_updates must be > 0, got {config.learner.max_updates}")
    if config.learner.max_time_s is not None and config.learner.max_time_s <= 0:
        problems.append(f"learner.max_time_s must be > 0, got {config.learner.max_time_s}")
    problems += _validate_slurm(config)
    return problems


def _validate_slurm(config: RunConfig) -> list[str]:
    slurm = config.slurm
    problems = []
    if slurm.layout not in ("hetjob", "multi-prog"):
        problems.append(f"slurm.layout must be hetjob or multi-prog, got {slurm.layout!r}")
    counts = {
        "slurm.actor_nodes": slurm.actor_nodes,
        "slurm.shard_nodes": slurm.shard_nodes,
        "slurm.learner_cpus": slurm.learner_cpus,
        "slurm.cpus_per_actor": slurm.cpus_per_actor,
        "slurm.cpus_per_shard": slurm.cpus_per_shard,
    }
    bad_counts = _not_positive_integers(counts)
    problems += bad_counts
    if not isinstance(slurm.learner_gpus, int) or slurm.learner_gpus < 0:
        problems.append(f"slurm.learner_gpus must be >= 0, got {slurm.learner_gpus!r}")
    if not isinstance(slurm.signal_before_end_s, int) or slurm.signal_before_end_s < 0:
        problems.append(
            f"slurm.signal_before_end_s must be >= 0 seconds, got {slurm.signal_before_end_s!r}"
        )
    ports = {
        "slurm.weights_port": slurm.weights_port,
        "slurm.episodes_port": slurm.episodes_port,
        "slurm.shard_port_base": slurm.shard_port_base,
    }
    for name, value in ports.items():
        if not isinstance(value, int) or not 1024 <= value <= 65535:
            problems.append(f"{name} must be a port in 1024..65535, got {value!r}")
    if slurm.layout == "multi-prog" or bad_counts:
        return problems  # multi-prog: one allocation, tasks fill its nodes in rank order
    if isinstance(config.actors, int) and config.actors % slurm.actor_nodes:
        problems.append(
            f"actors {config.actors} do not divide over slurm.actor_nodes {slurm.actor_nodes}"
        )
    if isinstance(config.shards, int) and config.shards % slurm.shard_nodes:
        problems.append(
            f"shards {config.shards} do not divide over slurm.shard_nodes {slurm.shard_nodes}"
        )
    return problems


def write_resolved(config: RunConfig, run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.json"
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def read_resolved(path: Path) -> RunConfig:
    """A ``config.json`` written by :func:`write_resolved` (validated again)."""
    return resolve(load_file(path))
