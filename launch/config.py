"""One config for a run: a TOML file (optional) plus command-line overrides, resolved into
one frozen dataclass per role and validated once, with every problem reported together.

File layout (every key optional; defaults come from the environment's preset)::

    env = "CartPole-v1"     # or a table: [env] id = "FrozenLake-v1", kwargs = {...},
                            # make = "package.module:function" (a factory of the env)
    algorithm = "auto"      # dqn, dpg, impala, r2d2, or auto: from the action space
    seed = 0
    actors = 2
    shards = 1

    [replay]        # ReplayConfig
    capacity = 100000

    [actor]         # apex.settings.ActorConfig (index and count are set per actor)
    envs_per_actor = 8

    [learner]       # apex.settings.LearnerConfig
    batch_size = 128

    [dqn]           # each algorithm's own section (apex.algorithms.registry.ALGORITHMS)
    epsilon = 0.4   # apex.algorithms.dqn.settings.DQNSettings
    target_update_period = 1000

    [dpg]           # apex.algorithms.dpg.settings.DPGSettings: DDPG, or TD3's fixes
    twin_critics = true

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
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from apex.algorithms.registry import ALGORITHMS, BY_NAME, SETTINGS, default_sections
from apex.algorithms.sized_defaults import cuda_asked, task_defaults
from apex.envs.presets import merged_sections, preset, preset_of_file, register, unregister
from apex.settings import ActorConfig, LearnerConfig
from launch.overrides import merge_overrides
from launch.renames import moved, refuse_renamed
from launch.replay_config import ReplayConfig
from launch.run_files import CONFIG_FILE
from launch.slurm_config import SlurmConfig
from replay.errors import ConfigError
from replay.store.field_checks import (
    not_positive_integers,
    type_problems,
)
from replay.wire.security import SecurityConfig

__all__ = ["ConfigError", "ReplayConfig", "RunConfig", "resolve"]

ROLE_SECTIONS = ("replay", "actor", "learner", "slurm", "security")
# A config file's sections: the roles', then each algorithm's.
SECTIONS = (*ROLE_SECTIONS, *BY_NAME)


@dataclass(frozen=True)
class RunConfig:
    """A whole run.

    Attributes:
        env: environment preset or gymnasium id (a config file's ``[env]`` table gives it
            as ``id``, with ``kwargs``).
        env_kwargs: arguments of the env's constructor, in every role's process (the
            ``[env]`` table's ``kwargs``; gymnasium and MinAtar envs).
        env_make: a user's env factory, ``"package.module:function"`` (the ``[env]``
            table's ``make``), called with ``env_kwargs`` in every role's process; ""
            for ``gymnasium.make(env)``.
        env_stack: the newest observations side by side (the ``[env]`` table's ``stack``,
            ``apex.envs.observation_stack``); 1 for none.
        algorithm: a registered algorithm's name (``apex.algorithms.registry``: "dqn",
            "impala" and "r2d2" take Discrete actions, "dpg" Box actions), or "auto": the
            first that the env's action space fits (DQN or DPG).
        seed: root seed; each role derives its own.
        actors: actor processes.
        shards: replay shard processes.
        host: address every role binds and connects on in a local run.
        log_max_mb: the size past which a role's log in ``logs/`` is rotated in a local
            run; each log and its 3 kept older parts take at most 4 times this.
        replay, actor, learner: per-role settings.
        algorithms: each registered algorithm's own section by name (``[dqn]``, ``[dpg]``,
            ``[impala]``; ``apex.algorithms.registry``), whichever runs.
        slurm: cluster layout, read by ``apex slurm submit`` only.
        preset: the run's own preset of ``env`` (a user's preset file): ``family``, ``id``
            and ``solved_return`` as in a preset file's ``[envs.NAME]``
            (``apex.envs.presets``); None: the built-in preset, or none.
        security: the run's CURVE keys (``replay.wire.security``); every role reads them.
    """

    env: str = "CartPole-v1"
    algorithm: str = "auto"
    seed: int = 0
    actors: int = 2
    shards: int = 1
    host: str = "127.0.0.1"
    log_max_mb: float = 32.0
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    algorithms: Mapping[str, Any] = field(default_factory=default_sections)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    preset: Mapping[str, Any] | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_make: str = ""
    env_stack: int = 1

    @property
    def queues(self) -> bool:
        """Whether the run's replay is queues (its algorithm's, ``replay.store.queue``)."""
        builder = BY_NAME.get(self.algorithm)
        return builder is not None and builder.replay == "queue"

    def actor_config(self, index: int) -> ActorConfig:
        return replace(self.actor, actor_index=index, actor_count=self.actors)

    def to_dict(self) -> dict:
        """Plain values, as a TOML file would give them: each algorithm's section at the
        top level under its name."""
        values = dataclasses.asdict(self)
        values.update(values.pop("algorithms"))
        kwargs, make, stack = (values.pop(f"env_{key}") for key in ("kwargs", "make", "stack"))
        if kwargs or make or stack != 1:
            values["env"] = {
                "id": self.env,
                "kwargs": kwargs,
                **({"make": make} if make else {}),
                **({"stack": stack} if stack != 1 else {}),
            }
        return values

    def problems(self) -> list[str]:
        """Every problem: each section's own, then the rules that span roles, with the
        arithmetic where there is some."""
        problems = [
            p for p in type_problems(self) if p.split(" ", 1)[0] not in ("actors", "shards")
        ]
        problems += not_positive_integers({"actors": self.actors, "shards": self.shards})
        if isinstance(self.log_max_mb, (int, float)) and not 0 < self.log_max_mb < math.inf:
            problems.append(f"log_max_mb must be finite and > 0, got {self.log_max_mb}")
        if self.algorithm not in SETTINGS:
            problems.append(
                f"algorithm must be one of {', '.join(SETTINGS)}, got {self.algorithm!r}"
            )
        problems += self.replay.problems(queue=self.queues)
        problems += self.actor.problems()
        problems += self.learner.problems()
        for name, section in self.algorithms.items():
            problems += section.problems(f"{name}.")
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
        builder = BY_NAME.get(self.algorithm)
        if builder is None or builder.replay != "queue":
            queued = ", ".join(b.name for b in ALGORITHMS if b.replay == "queue")
            problems.append(
                f"actor.lockstep is for an algorithm whose replay is a queue "
                f"({queued}): rounds of items each trained on once"
            )
        # The learner splits a batch over shards by how much each held when last asked,
        # and a shard asked for more than its part of a round would wait for a round that
        # never comes.
        if self.shards != 1:
            problems.append(f"actor.lockstep needs shards = 1, got {self.shards}")
        for name, value in (
            ("learner.publish_period", learner.publish_period),
            ("actor.refresh_versions", actor.refresh_versions),
            ("actor.env_groups", actor.env_groups),
        ):
            if value != 1:
                problems.append(f"actor.lockstep needs {name} = 1, got {value}")
        if replay.replay_share:  # a preset's too (IMPALA's on CartPole)
            problems.append(
                f"actor.lockstep trains on the learner's own policy; "
                f"replay.replay_share {replay.replay_share} would replay older "
                "unrolls: set replay.replay_share=0"
            )
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


def _table(values: dict, name: str, problems: list[str], where: str | None = None) -> dict:
    """The table ``values[name]`` (a problem naming ``where``, default ``name``, and an
    empty table, where it is not one)."""
    table = values.get(name, {})
    if not isinstance(table, dict):
        problems.append(f"{where or name} must be a table of settings, got {table!r}")
        return {}
    return table


def _algorithms(values: dict, problems: list[str]) -> dict[str, Any]:
    """Each registered algorithm's section, by name."""
    return {
        builder.name: _build(
            builder.settings_type, _table(values, builder.name, problems), builder.name, problems
        )
        for builder in ALGORITHMS
    }


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


def resolve(
    file_values: dict | None = None, overrides: dict | None = None, *, sized: bool = True
) -> RunConfig:
    """Preset defaults (the env's, then its algorithm's), then the file, then the
    overrides; validated. ``sized``: an env with no preset settings starts from settings
    sized to it (``apex.algorithms.sized_defaults``, which makes one env to see it).

    Raises:
        ConfigError: listing every problem found.
    """
    file_values, overrides = _env_tables(file_values or {}, overrides or {})
    values = moved(merge_overrides(file_values, overrides))
    problems: list[str] = []
    env, env_kwargs, env_make, env_stack = _env_table(values.get("env", RunConfig.env), problems)
    values["env"] = env
    algorithm = values.get("algorithm", RunConfig.algorithm)
    # The preset is this config's: none left from another run resolved in this process.
    unregister(str(env))
    own = values.get("preset")
    if own is not None:
        try:
            register(preset_of_file(_table(values, "preset", problems), str(env), "the run config"))
        except ConfigError as exc:
            problems += exc.problems
    chosen = preset(str(env))
    # This run's arguments and factory, none left from another run resolved here.
    if any((env_kwargs, env_make, env_stack != 1, chosen.kwargs, chosen.make, chosen.stack != 1)):
        if env_kwargs and chosen.atari:
            problems.append(
                f"[env] kwargs: {env} is an ALE game, made by ale-py's vector env, which takes none"
            )
        if env_stack != 1 and chosen.atari and not env_make:
            problems.append(
                f"[env] stack: {env} is an ALE game, whose pipeline stacks its frames itself (4)"
            )
        register(
            dataclasses.replace(
                chosen,
                kwargs=env_kwargs,
                make=env_make,
                stack=env_stack,
                family="gymnasium" if env_make else chosen.family,
            )
        )
    builder = BY_NAME.get(algorithm)
    run_defaults = builder.run_defaults if builder is not None else {}
    if sized:  # the rule over the algorithm's run-wide defaults, a preset's over both
        rule = task_defaults(str(env), str(algorithm), cuda_asked(values))
        run_defaults = merged_sections(run_defaults, rule.settings)
    defaults = preset(str(env)).settings_for(algorithm, run_defaults)
    values = merge_overrides(defaults, values)
    values = refuse_renamed(values, problems)
    top_level = {f.name for f in fields(RunConfig)} - set(SECTIONS)
    top_level -= {"algorithms", "env_kwargs", "env_make", "env_stack"}
    for key in values:
        if key not in top_level | set(SECTIONS):
            problems.append(f"unknown top-level setting {key!r}")
    # Every role's section carries the run's env, algorithm and seed.
    common = {
        "env": env,
        "seed": values.get("seed", 0),
        "algorithm": values.get("algorithm", RunConfig.algorithm),
    }
    replay = _build(ReplayConfig, values.get("replay", {}), "replay", problems)
    # The learner's network is the actors' too.
    network = dict(values.get("learner", {})).get("network", "")
    actor_values = dict(values.get("actor", {}))
    if actor_values.get("network", network) != network:
        problems.append("actor.network is learner.network's: set learner.network alone")
    actor = _build(ActorConfig, {**common, **actor_values, "network": network}, "actor", problems)
    learner = _build(LearnerConfig, {**common, **values.get("learner", {})}, "learner", problems)
    algorithms = _algorithms(values, problems)
    slurm = _build(SlurmConfig, values.get("slurm", {}), "slurm", problems)
    security = _build(SecurityConfig, values.get("security", {}), "security", problems)
    config = RunConfig(
        replay=replay,
        actor=actor,
        learner=learner,
        algorithms=algorithms,
        slurm=slurm,
        security=security,
        env_kwargs=env_kwargs,
        env_make=env_make,
        env_stack=env_stack,
        **{k: v for k, v in values.items() if k in top_level},
    )
    problems += config.problems()
    if problems:
        raise ConfigError(problems)
    return config


def _env_tables(*layers: dict) -> list[dict]:
    """The layers, each ``env = "Id"`` made ``[env] id = "Id"`` where another layer has
    an ``[env]`` table, so that they merge key by key."""
    if not any(isinstance(layer.get("env"), dict) for layer in layers):
        return list(layers)
    return [
        {**layer, "env": {"id": layer["env"]}} if isinstance(layer.get("env"), str) else layer
        for layer in layers
    ]


def _env_table(env: object, problems: list[str]) -> tuple[object, dict, str, int]:
    """The env's name, constructor arguments, factory and stack: ``env = "Id"``, or an
    ``[env]`` table of ``id``, ``kwargs``, ``make`` (the name defaults to the factory's)
    and ``stack``."""
    if not isinstance(env, dict):
        return env, {}, "", 1
    for key in sorted(set(env) - {"id", "kwargs", "make", "stack"}):
        problems.append(f"[env]: unknown key {key!r} (known: id, kwargs, make, stack)")
    make, kwargs, stack = env.get("make", ""), env.get("kwargs", {}), env.get("stack", 1)
    if isinstance(stack, bool) or not isinstance(stack, int) or stack < 1:
        problems.append(f"[env] stack must be a whole number of observations >= 1, got {stack!r}")
        stack = 1
    if not isinstance(make, str):
        problems.append(f"[env] make must be package.module:function, got {make!r}")
        make = ""
    name = env.get("id", make or None)
    if not isinstance(name, str) or not name:
        problems.append(
            f"[env] needs an id (a gymnasium id or preset name) or a make, got {name!r}"
        )
        name = RunConfig.env
    if not isinstance(kwargs, dict):
        problems.append(f"[env] kwargs must be a table of the env's arguments, got {kwargs!r}")
        kwargs = {}
    return name, kwargs, make, stack


def write_resolved(config: RunConfig, run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CONFIG_FILE
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def read_resolved(path: Path) -> RunConfig:
    """A ``config.json`` written by :func:`write_resolved` (validated again; it holds
    every setting, so no env is made to size it)."""
    return resolve(load_file(path), sized=False)
