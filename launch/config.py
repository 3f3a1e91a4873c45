"""One config for a run: a TOML file (optional) plus command-line overrides, resolved into
one frozen dataclass per role and validated once, with every problem reported together.

File layout (every key optional; defaults come from the environment preset)::

    env = "CartPole-v1"
    seed = 0
    actors = 2
    shards = 1

    [replay]        # ReplayConfig
    capacity = 100000

    [actor]         # apex.settings.ActorConfig (index and count are set per actor)
    envs_per_actor = 8

    [learner]       # apex.settings.LearnerConfig
    batch_size = 128

    [learner.dqn]   # each algorithm's own section (apex.algorithms.registry.ALGORITHMS):
    apex.algorithms.dqn.learner target_update_period = 1000

    [learner.dpg]   # apex.algorithms.dpg.learner.Settings: DDPG at the defaults, TD3 with its
    three fixes twin_critics = true

    [slurm]         # launch.slurm_config.SlurmConfig: only `apex slurm submit` reads these
    partition = "gpu"

    [security]      # replay.wire.security.SecurityConfig
    keys = "keys"   # CURVE keys (apex keys generate DIR); needed to bind beyond loopback

Each section's dataclass validates itself (``problems``); :class:`RunConfig` adds the
rules that span roles. The resolved config is written to ``<run_dir>/config.json``; every
role of the run reads that file, so a local run and a Slurm run are built from the same
values. ``launch.builder`` turns it into running parts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from apex.algorithms.registry import ALGORITHMS, SETTINGS
from apex.envs.families import preset
from apex.envs.preset_defaults import ALGORITHM_DEFAULTS, ALGORITHM_ENV_DEFAULTS
from apex.settings import ActorConfig, LearnerConfig
from launch.keeper import SHARD_RESTART_BUDGET
from launch.overrides import merge_overrides
from launch.slurm_config import SlurmConfig
from replay.errors import ConfigError
from replay.server.config import DEFAULT_CAPACITY
from replay.server.rate_limiter import RateLimiter
from replay.store.field_checks import (
    alpha_problems,
    checked,
    not_positive_integers,
    type_problems,
)
from replay.wire.security import SecurityConfig

__all__ = ["ConfigError", "ReplayConfig", "RunConfig", "resolve"]

# Settings that were renamed and are refused with their new name: old -> new.
RENAMED = {"actor.max_in_flight": "actor.insert_credit"}
# Settings that moved into an algorithm's section: still read, with a notice, as the new.
MOVED = {
    "learner.target_update_period": "learner.dqn.target_update_period",
    **{f"learner.{key}": f"learner.dpg.{key}"
       for key in ("tau", "twin_critics", "policy_delay", "target_noise", "noise_clip")},
}  # fmt: skip
# Settings that no longer exist, with what took their place: dropped with a notice, so a
# run directory written before still resumes.
RETIRED = {
    "learner.eval_interval_s": "evaluations follow env steps now (learner.eval_every_steps)",
}

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayConfig:
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
        frames: keep each frame of image-stack observations once (``replay.frames.storage``);
            None: yes where the env family stacks frames (the ALE pipeline's), else every
            observation whole. True for another env: its observations are proven to be
            stacks before the run starts and by each actor (``apex.acting.frame_check``).
        compress_frames: keep (and send) those frames LZ4-compressed.
        gather_threads: threads a shard puts a sampled batch's stacks together with; 0:
            the cores it may use, at most 4.
        snapshot_interval_s: seconds between a shard's background snapshots in a run
            (``RUN_DIR/replay/shard-N``; a shard also writes one when it stops, and comes
            back from the newest when the run resumes or requeues); 0: no snapshots.
        replay_share: for IMPALA's queues, the share of each batch replayed from unrolls
            handed out before (its experience-replay variant), in [0, 1); 0: none.
        restart_budget: times a dead shard is restarted (by ``apex train``'s supervisor, or
            its Slurm task's keeper). Past it the shard is given up: the run goes on with
            the others (actors send them what they kept for it after
            ``actor.reroute_after_s``), or ends when none is left.
    """

    capacity: int = DEFAULT_CAPACITY
    alpha: float = 0.6
    min_size: int = 50_000
    samples_per_insert: float | None = None
    error_buffer: float = 0.0
    frames: bool | None = None
    compress_frames: bool = True
    gather_threads: int = 0
    snapshot_interval_s: float = 300.0
    replay_share: float = 0.0
    restart_budget: int = SHARD_RESTART_BUDGET

    def shard_share(self, shards: int) -> ReplayConfig:
        """One shard's settings: totals divided over ``shards``, integers rounded up."""
        return replace(
            self,
            capacity=-(-self.capacity // shards),
            min_size=-(-self.min_size // shards),
            error_buffer=self.error_buffer / shards,
        )

    def problems(self, prefix: str = "replay.") -> list[str]:
        """Every problem with these settings (empty if none). The rate limiter's own rules
        (``RateLimiter.problems``) apply to the totals as they do to each shard; each
        shard's own checks run on its share (``launch.preflight``)."""
        return checked(self, prefix, lambda: self._range_problems(prefix))

    def _range_problems(self, prefix: str) -> list[str]:
        problems = alpha_problems(self.alpha, f"{prefix}alpha")
        problems += not_positive_integers(
            {f"{prefix}capacity": self.capacity, f"{prefix}min_size": self.min_size}
        )
        interval = self.snapshot_interval_s
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval < 0:
            problems.append(f"{prefix}snapshot_interval_s must be >= 0 (0: none), got {interval!r}")
        budget = self.restart_budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            problems.append(f"{prefix}restart_budget must be an integer >= 0, got {budget!r}")
        if not isinstance(self.replay_share, (int, float)) or not 0 <= self.replay_share < 1:
            problems.append(f"{prefix}replay_share must be in [0, 1), got {self.replay_share!r}")
        threads = self.gather_threads
        if not isinstance(threads, int) or isinstance(threads, bool) or not 0 <= threads <= 64:
            problems.append(f"{prefix}gather_threads must be in [0, 64], got {self.gather_threads}")
        if problems:
            return problems
        return [
            f"{prefix}{problem}"
            for problem in RateLimiter.problems(
                self.min_size, self.samples_per_insert, self.error_buffer, self.capacity
            )
        ]


SECTIONS = ("replay", "actor", "learner", "slurm", "security")


@dataclass(frozen=True)
class RunConfig:
    """A whole run.

    Attributes:
        env: environment preset or gymnasium id.
        algorithm: "dqn" (Discrete actions), "dpg" (Box actions), or "auto": the one the
            env's action space calls for.
        seed: root seed; each role derives its own.
        actors: actor processes.
        shards: replay shard processes.
        host: address every role binds and connects on in a local run.
        replay, actor, learner: per-role settings.
        slurm: cluster layout, read by ``apex slurm submit`` only.
        security: the run's CURVE keys (``replay.wire.security``); every role reads them.
    """

    env: str = "CartPole-v1"
    algorithm: str = "auto"
    seed: int = 0
    actors: int = 2
    shards: int = 1
    host: str = "127.0.0.1"
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def actor_config(self, index: int) -> ActorConfig:
        return replace(self.actor, actor_index=index, actor_count=self.actors)

    def to_dict(self) -> dict:
        """Plain values, as a TOML file would give them: each algorithm's section sits in
        ``learner`` under its name (``learner.dqn``, ``learner.dpg``)."""
        values = dataclasses.asdict(self)
        learner = values["learner"]
        learner.update(learner.pop("algorithms"))
        return values

    def problems(self) -> list[str]:
        """Every problem: each section's own, then the rules that span roles, with the
        arithmetic where there is some."""
        problems = [
            p for p in type_problems(self) if p.split(" ", 1)[0] not in ("actors", "shards")
        ]
        problems += not_positive_integers({"actors": self.actors, "shards": self.shards})
        if self.algorithm not in SETTINGS:
            problems.append(
                f"algorithm must be one of {', '.join(SETTINGS)}, got {self.algorithm!r}"
            )
        problems += self.replay.problems()
        problems += self.actor.problems()
        problems += self.learner.problems()
        problems += self.slurm.problems(self.actors, self.shards)
        problems += self.security.problems()
        if self.actor.lockstep is True:
            problems += self._lockstep_problems()
        if tuple(self.actor.hidden) != tuple(self.learner.hidden):
            problems.append(
                f"actor.hidden {tuple(self.actor.hidden)} and learner.hidden "
                f"{tuple(self.learner.hidden)} differ: actors could not load the learner's "
                "weights"
            )
        replay, batch_size = self.replay, self.learner.batch_size
        integers = all(
            isinstance(n, int) and not isinstance(n, bool) for n in (replay.min_size, batch_size)
        )
        # A first batch must not be asked of less data than itself.
        if integers and replay.min_size < batch_size:
            problems.append(
                f"replay.min_size {replay.min_size} < learner.batch_size {batch_size}: "
                "raise replay.min_size"
            )
        return problems

    def _lockstep_problems(self) -> list[str]:
        """Lock-step actors wait for the learner, and the learner for their unrolls:
        whatever could leave both waiting is refused."""
        actor, learner, replay = self.actor, self.learner, self.replay
        problems = []
        if self.algorithm != "impala":
            problems.append('actor.lockstep is for algorithm = "impala" (rounds of unrolls)')
        # The learner splits a batch over shards by how much each held when last asked,
        # and a shard asked for more than its part of a round would wait for a round that
        # never comes.
        if self.shards != 1:
            problems.append(f"actor.lockstep needs shards = 1, got {self.shards}")
        for name, value in (("learner.publish_period", learner.publish_period),
                            ("actor.refresh_versions", actor.refresh_versions),
                            ("actor.env_groups", actor.env_groups)):  # fmt: skip
            if value != 1:
                problems.append(f"actor.lockstep needs {name} = 1, got {value}")
        if replay.replay_share:  # a preset's too (IMPALA's on CartPole)
            problems.append(f"actor.lockstep trains on the learner's own policy; "
                            f"replay.replay_share {replay.replay_share} would replay older "
                            "unrolls: set replay.replay_share=0")  # fmt: skip
        counts = (self.actors, actor.envs_per_actor, replay.min_size, learner.batch_size)
        if not all(isinstance(n, int) for n in counts):
            return problems  # the type problems say what
        round_size, needed = self.actors * actor.envs_per_actor, max(counts[2:])
        if round_size < needed:
            problems.append(
                f"actor.lockstep: a round is {round_size} unrolls (actors × "
                f"actor.envs_per_actor), less than the {needed} the learner waits for "
                "(replay.min_size, learner.batch_size): both would wait forever"
            )
        return problems


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


def _learner(values: dict, problems: list[str]) -> LearnerConfig:
    """The learner's section, with each registered algorithm's own section inside it."""
    values = dict(values)
    algorithms = {}
    for entry in ALGORITHMS:
        section = values.pop(entry.name, {})
        name = f"learner.{entry.name}"
        if not isinstance(section, dict):
            problems.append(f"{name} must be a table of settings, got {section!r}")
            section = {}
        algorithms[entry.name] = _build(entry.load().Settings, section, name, problems)
    return _build(LearnerConfig, {**values, "algorithms": algorithms}, "learner", problems)


def _moved(values: dict) -> dict:
    """``values`` with the settings of :data:`MOVED` in their new places, each with a
    notice; a setting given in both places keeps the new one. Those of :data:`RETIRED`
    are dropped, with a notice."""
    for old, why in RETIRED.items():
        section, key = old.split(".")
        if key in values.get(section, {}):
            logger.warning("%s is no longer read: %s", old, why)
            values = {**values, section: {k: v for k, v in values[section].items() if k != key}}
    for old, new in MOVED.items():
        section, key = old.split(".")
        if key not in values.get(section, {}):
            continue
        logger.warning("%s is now %s; read as that (rename it to silence this)", old, new)
        old_section = {k: v for k, v in values[section].items() if k != key}
        _, table, new_key = new.split(".")
        inner = dict(old_section.get(table, {}))
        inner.setdefault(new_key, values[section][key])
        values = {**values, section: {**old_section, table: inner}}
    return values


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
    """Preset defaults (the env's, then its algorithm's), then the file, then the
    overrides; validated.

    Raises:
        ConfigError: listing every problem found.
    """
    values = _moved(merge_overrides(file_values or {}, overrides or {}))
    env = values.get("env", RunConfig.env)
    algorithm = values.get("algorithm", RunConfig.algorithm)
    defaults = merge_overrides(dict(preset(env).defaults), ALGORITHM_DEFAULTS.get(algorithm, {}))
    defaults = merge_overrides(defaults, ALGORITHM_ENV_DEFAULTS.get((algorithm, env), {}))
    values = merge_overrides(defaults, values)
    problems: list[str] = []
    for old, new in RENAMED.items():
        section, key = old.split(".")
        if key in values.get(section, {}):
            problems.append(f"{old} was renamed to {new}")
            kept = {k: v for k, v in values[section].items() if k != key}
            values = {**values, section: kept}
    top_level = {f.name for f in fields(RunConfig)} - set(SECTIONS)
    for key in values:
        if key not in top_level | set(SECTIONS):
            problems.append(f"unknown top-level setting {key!r}")
    # Every role's section carries the run's env, algorithm and seed.
    common = {"env": env, "seed": values.get("seed", 0),
              "algorithm": values.get("algorithm", RunConfig.algorithm)}  # fmt: skip
    replay = _build(ReplayConfig, values.get("replay", {}), "replay", problems)
    actor = _build(ActorConfig, {**common, **values.get("actor", {})}, "actor", problems)
    learner = _learner({**common, **values.get("learner", {})}, problems)
    slurm = _build(SlurmConfig, values.get("slurm", {}), "slurm", problems)
    security = _build(SecurityConfig, values.get("security", {}), "security", problems)
    config = RunConfig(
        replay=replay,
        actor=actor,
        learner=learner,
        slurm=slurm,
        security=security,
        **{k: v for k, v in values.items() if k in top_level},
    )
    problems += config.problems()
    if problems:
        raise ConfigError(problems)
    return config


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
