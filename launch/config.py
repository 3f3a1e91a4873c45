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

    [slurm]         # SlurmConfig: only `apex slurm submit` reads these
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
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from apex.envs import ALGORITHMS, preset
from apex.settings import ActorConfig, LearnerConfig, named, not_positive_integers
from launch.keeper import SHARD_RESTART_BUDGET
from replay.errors import ConfigError
from replay.server.config import DEFAULT_CAPACITY
from replay.server.rate_limiter import RateLimiter
from replay.store.field_checks import alpha_problems, checked, type_problems
from replay.wire.security import SecurityConfig

__all__ = ["ConfigError", "ReplayConfig", "RunConfig", "SlurmConfig", "resolve"]

# Settings that were renamed: old name -> new name, both as SECTION.KEY.
RENAMED = {"actor.max_in_flight": "actor.insert_credit"}


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
            None: yes exactly when ``obs`` is a stack of images (Atari), else whole.
        compress_frames: keep (and send) those frames LZ4-compressed.
        gather_threads: threads a shard puts a sampled batch's stacks together with; 0:
            the cores it may use, at most 4.
        snapshot_interval_s: seconds between a shard's background snapshots in a run
            (``RUN_DIR/replay/shard-N``; a shard also writes one when it stops, and comes
            back from the newest when the run resumes or requeues); 0: no snapshots.
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


@dataclass(frozen=True)
class SlurmConfig:
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

    def problems(self, actors: object, shards: object, prefix: str = "slurm.") -> list[str]:
        """Every problem with this layout for a run of ``actors`` and ``shards``."""
        return checked(self, prefix, lambda: self._range_problems(actors, shards, prefix))

    def _range_problems(self, actors: object, shards: object, prefix: str) -> list[str]:
        problems = []
        if self.layout not in ("hetjob", "multi-prog"):
            problems.append(f"{prefix}layout must be hetjob or multi-prog, got {self.layout!r}")
        counts = (
            "actor_nodes",
            "shard_nodes",
            "learner_cpus",
            "cpus_per_actor",
            "cpus_per_shard",
        )
        bad_counts = not_positive_integers(named(self, prefix, counts))
        problems += bad_counts
        if not isinstance(self.learner_gpus, int) or self.learner_gpus < 0:
            problems.append(f"{prefix}learner_gpus must be >= 0, got {self.learner_gpus!r}")
        if not isinstance(self.signal_before_end_s, int) or self.signal_before_end_s < 0:
            problems.append(
                f"{prefix}signal_before_end_s must be >= 0 seconds, "
                f"got {self.signal_before_end_s!r}"
            )
        for name in ("weights_port", "episodes_port", "shard_port_base"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1024 <= value <= 65535:
                problems.append(f"{prefix}{name} must be a port in 1024..65535, got {value!r}")
        if self.layout == "multi-prog" or bad_counts:
            return problems  # multi-prog: one allocation, tasks fill its nodes in rank order
        if isinstance(actors, int) and actors % self.actor_nodes:
            problems.append(
                f"actors {actors} do not divide over {prefix}actor_nodes {self.actor_nodes}"
            )
        if isinstance(shards, int) and shards % self.shard_nodes:
            problems.append(
                f"shards {shards} do not divide over {prefix}shard_nodes {self.shard_nodes}"
            )
        return problems


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
        return dataclasses.asdict(self)

    def problems(self) -> list[str]:
        """Every problem: each section's own, then the rules that span roles, with the
        arithmetic where there is some."""
        problems = [
            p for p in type_problems(self) if p.split(" ", 1)[0] not in ("actors", "shards")
        ]
        problems += not_positive_integers({"actors": self.actors, "shards": self.shards})
        if self.algorithm not in ALGORITHMS:
            problems.append(
                f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}"
            )
        problems += self.replay.problems()
        problems += self.actor.problems()
        problems += self.learner.problems()
        problems += self.slurm.problems(self.actors, self.shards)
        problems += self.security.problems()
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
    values = _merge(dict(preset(env).defaults), values)
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
    learner = _build(LearnerConfig, {**common, **values.get("learner", {})}, "learner", problems)
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
