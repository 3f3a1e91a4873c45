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

from apex.actor import ActorConfig
from apex.learner import LearnerConfig


class ConfigError(ValueError):
    """Every problem found in a run config, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid run config:\n  - " + "\n  - ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ReplaySettings:
    """Settings shared by every replay shard of a run.

    Attributes:
        capacity: transitions kept per shard.
        alpha: priority exponent.
        min_size: transitions a shard holds before it answers samples.
        samples_per_insert: the replay ratio each shard holds (None: no limit).
        error_buffer: allowed deviation from ``samples_per_insert``, in transitions.
    """

    capacity: int = 1_000_000
    alpha: float = 0.6
    min_size: int = 50_000
    samples_per_insert: float | None = None
    error_buffer: float = 0.0


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
    """

    env: str = "CartPole-v1"
    seed: int = 0
    actors: int = 2
    shards: int = 1
    host: str = "127.0.0.1"
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    actor: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)

    def actor_config(self, index: int) -> ActorConfig:
        return replace(self.actor, actor_index=index, actor_count=self.actors)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Defaults per environment, measured to learn quickly on a 2-core machine. Anything the
# user sets wins over these.
PRESET_DEFAULTS: dict[str, dict] = {
    "CartPole-v1": {
        "actors": 2,
        "shards": 1,
        "replay": {
            "capacity": 100_000,
            "min_size": 2_000,
            "samples_per_insert": 4.0,
            "error_buffer": 20_000.0,
        },
        "actor": {"envs_per_actor": 4, "weight_refresh_steps": 25, "hidden": [128, 128]},
        "learner": {
            "batch_size": 64,
            "learning_rate": 2.3e-3,
            "adam_epsilon": 1e-8,
            "max_grad_norm": 10.0,
            "target_update_period": 128,
            "publish_period": 20,
            "eval_interval_s": 1.5,
            "hidden": [128, 128],
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
    top_level = {f.name for f in fields(RunConfig)} - {"replay", "actor", "learner"}
    for key in values:
        if key not in top_level | {"replay", "actor", "learner"}:
            problems.append(f"unknown top-level setting {key!r}")
    seed = values.get("seed", 0)
    replay = _build(ReplaySettings, values.get("replay", {}), "replay", problems)
    actor = _build(
        ActorConfig, {"env": env, "seed": seed, **values.get("actor", {})}, "actor", problems
    )
    learner = _build(
        LearnerConfig, {"env": env, "seed": seed, **values.get("learner", {})}, "learner", problems
    )
    config = RunConfig(
        replay=replay,
        actor=actor,
        learner=learner,
        **{k: v for k, v in values.items() if k in top_level},
    )
    problems += validate(config)
    if problems:
        raise ConfigError(problems)
    return config


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
        "actor.weight_refresh_steps": config.actor.weight_refresh_steps,
        "learner.batch_size": config.learner.batch_size,
        "learner.target_update_period": config.learner.target_update_period,
        "learner.publish_period": config.learner.publish_period,
        "learner.prefetch": config.learner.prefetch,
        "learner.eval_episodes": config.learner.eval_episodes,
    }
    for name, value in positive.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            problems.append(f"{name} must be a positive integer, got {value!r}")
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
            f"replay.min_size {replay.min_size} > replay.capacity {replay.capacity}: a shard "
            "never holds more than its capacity, so it would never sample"
        )
    numbers = (config.learner.batch_size, replay.min_size, config.shards)
    # Sampling starts once every shard holds min_size; a first batch must not be asked of
    # less data than itself: shards · min_size >= batch_size.
    if all(isinstance(n, int) for n in numbers) and (
        config.shards * replay.min_size < config.learner.batch_size
    ):
        problems.append(
            f"shards × replay.min_size = {config.shards} × {replay.min_size} < "
            f"learner.batch_size {config.learner.batch_size}: raise replay.min_size"
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
