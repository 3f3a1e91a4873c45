"""Environment presets as data: what ``--env`` names, how the env is made, when it is solved,
and the run settings it starts from, read from TOML files.

The built-in presets are the files of ``apex/envs/preset_files`` (one per env family or
env); a user's preset is a run config file with a ``[preset]`` table (see
:func:`preset_of_file`), which ``launch.config.resolve`` registers for the run. A preset
file::

    family = "gymnasium"          # how its envs are made: gymnasium, atari, minatar
    extra = "box2d"               # the optional dependency its envs need (default: none;
                                  # the atari and minatar families: theirs)

    [envs."CartPole-v1"]          # a name --env accepts
    id = "CartPole-v1"            # the gymnasium id (default: the name)
    solved_return = 475.0         # the greedy mean that solves it (default: none)

    ids = "ALE/*-v5"              # more gymnasium ids of the family, with no threshold

    [settings]                    # run config sections every run of it starts from
    actors = 1
    [settings.learner]
    batch_size = 64

    [algorithms.impala.learner]   # over [settings], when that algorithm runs
    batch_size = 8

Every file is checked when read: an unknown family or key, or a setting that is not a
table where one is due, is an error naming the file.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from replay.errors import ConfigError

FAMILIES = ("gymnasium", "atari", "minatar")
PRESET_DIR = Path(__file__).with_name("preset_files")
_FILE_KEYS = {"family", "extra", "envs", "ids", "settings", "algorithms"}
# An ALE game by its bare name (``Breakout``) is its gymnasium id's (``ALE/Breakout-v5``).
ALE_ID = "ALE/{}-v5"
_ENV_KEYS = {"id", "solved_return"}


@dataclass(frozen=True)
class EnvPreset:
    """A named environment.

    Attributes:
        name: what ``--env`` accepts.
        solved_return: greedy mean return over evaluation episodes that counts as solved
            (None: none).
        family: how it is made: "gymnasium" (``gym.make``), "atari" (the ALE pipeline of
            DQN's preprocessing, ``apex.envs.families.make_atari``) or "minatar" (the
            minatar extra: 10x10 planes of objects, one channel per kind, as uint8).
        gym_id: the gymnasium id to make.
        defaults: run settings for it (sections as in a config file).
        algorithm_defaults: more settings by algorithm name, over ``defaults``.
        source: the file it was read from ("" for an env with no preset).
        kwargs: arguments of the env's constructor (a run config's ``[env] kwargs``).
        make: a user's factory of the env, ``"package.module:function"`` (a run
            config's ``[env] make``), called with ``kwargs``; "" for ``gym.make``.
        extra: the project's optional dependency it needs (``pip install -e '.[box2d]'``),
            "" for none.
        stack: observations side by side (a run config's ``[env] stack``,
            ``apex.envs.observation_stack``); 1 for none.
    """

    name: str
    solved_return: float | None
    family: str = "gymnasium"
    gym_id: str = ""
    defaults: Mapping[str, object] = field(default_factory=dict)
    algorithm_defaults: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    source: str = ""
    kwargs: Mapping[str, object] = field(default_factory=dict)
    make: str = ""
    extra: str = ""
    stack: int = 1

    @property
    def atari(self) -> bool:
        return self.family == "atari"

    @property
    def minatar(self) -> bool:
        return self.family == "minatar"

    def settings_for(self, algorithm: str, run_defaults: Mapping = MappingProxyType({})) -> dict:
        """The run settings it starts from with ``algorithm`` (a name, or "auto"): its
        own, then the algorithm's ``run_defaults`` (its settings for any env), then its
        settings for that algorithm."""
        from_algorithm = self.algorithm_defaults.get(algorithm, {})
        return merged_sections(merged_sections(self.defaults, run_defaults), from_algorithm)


# What each of the project's extras installs that its envs import.
EXTRA_MODULES = {"atari": "ale_py", "box2d": "Box2D", "minatar": "minatar", "mujoco": "mujoco"}


def extra_installed(extra: str) -> bool:
    """Whether ``extra`` ("" for none) is installed here (found, not imported)."""
    import importlib.util

    module = EXTRA_MODULES.get(extra)
    return not extra or module is None or importlib.util.find_spec(module) is not None


def merged_sections(base: Mapping, over: Mapping) -> dict:
    """``over`` on ``base``, table by table (a section's table inside another included):
    how a preset's settings, a run config file and the command line's add up."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merged_sections(merged[key], value)
        else:
            merged[key] = value
    return merged


def _table(value: object, where: str, problems: list[str]) -> dict:
    if isinstance(value, dict):
        return value
    problems.append(f"{where} must be a table, got {value!r}")
    return {}


def read_presets(values: dict, source: str) -> list[EnvPreset]:
    """The presets one file's ``values`` define.

    Raises:
        ConfigError: every problem with them, each naming ``source``.
    """
    problems: list[str] = []
    for key in sorted(set(values) - _FILE_KEYS):
        problems.append(f"{source}: unknown key {key!r} (known: {', '.join(sorted(_FILE_KEYS))})")
    family = values.get("family", "gymnasium")
    if family not in FAMILIES:
        problems.append(f"{source}: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    extra = values.get("extra", family if family in ("atari", "minatar") else "")
    if not isinstance(extra, str):
        problems.append(
            f"{source}: extra must be the name of an optional dependency, got {extra!r}"
        )
        extra = ""
    settings = _table(values.get("settings", {}), f"{source}: settings", problems)
    by_algorithm = _table(values.get("algorithms", {}), f"{source}: algorithms", problems)
    for name, table in by_algorithm.items():
        _table(table, f"{source}: algorithms.{name}", problems)
    envs = _table(values.get("envs", {}), f"{source}: envs", problems)
    ids = values.get("ids")
    if ids is not None and not (isinstance(ids, str) and ids):
        problems.append(f"{source}: ids must be a pattern of gymnasium ids, got {ids!r}")
    if not envs and not problems:
        problems.append(f"{source}: no [envs.NAME] table: it presets no environment")
    presets = []
    for name, given in envs.items():
        env = _table(given, f"{source}: envs.{name}", problems)
        for key in sorted(set(env) - _ENV_KEYS):
            problems.append(
                f"{source}: envs.{name}: unknown key {key!r} (known: id, solved_return)"
            )
        solved = env.get("solved_return")
        if isinstance(solved, bool) or not isinstance(solved, (int, float, type(None))):
            problems.append(f"{source}: envs.{name}.solved_return must be a number, got {solved!r}")
            solved = None
        gym_id = env.get("id", name)
        if not isinstance(gym_id, str) or not gym_id:
            problems.append(f"{source}: envs.{name}.id must be a gymnasium id, got {gym_id!r}")
        presets.append(
            EnvPreset(
                name,
                None if solved is None else float(solved),
                family,
                str(gym_id),
                settings,
                by_algorithm,
                source,
                extra=extra,
            )
        )
    if ids is not None and not problems:
        presets.append(
            EnvPreset(ids, None, family, ids, settings, by_algorithm, source, extra=extra)
        )
    if problems:
        raise ConfigError(problems, what="preset")
    return presets


def read_preset_file(path: Path) -> list[EnvPreset]:
    """The presets of a preset file.

    Raises:
        ConfigError: an unreadable file, invalid TOML, or problems with its presets.
    """
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"cannot read preset file {path}: {exc.strerror}"], "preset") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path} is not valid TOML: {exc}"], "preset") from exc
    return read_presets(values, str(path))


def _built_in() -> tuple[dict[str, EnvPreset], dict[str, EnvPreset]]:
    """The built-in presets by name, and the families' patterns of more ids by pattern."""
    found: dict[str, EnvPreset] = {}
    patterns: dict[str, EnvPreset] = {}
    for path in sorted(PRESET_DIR.glob("*.toml")):
        for chosen in read_preset_file(path):
            into = patterns if "*" in chosen.name else found
            if chosen.name in into:
                raise ConfigError(
                    [f"{path}: {chosen.name} is preset in {into[chosen.name].source} too"]
                )
            into[chosen.name] = chosen
    return found, patterns


PRESETS, FAMILY_IDS = _built_in()
# The built-in presets by gymnasium id: ``ALE/Pong-v5`` is Pong's.
_BY_GYM_ID = {chosen.gym_id: chosen for chosen in PRESETS.values()}
# A run's own presets (a user's preset file), by name: registered by the run's config.
_REGISTERED: dict[str, EnvPreset] = {}


def register(chosen: EnvPreset) -> None:
    """Makes ``chosen`` the preset of its name in this process (a run's own preset)."""
    _REGISTERED[chosen.name] = chosen


def unregister(name: str) -> None:
    """``name`` has the built-in preset again (or none) in this process."""
    _REGISTERED.pop(name, None)


def preset(name: str) -> EnvPreset:
    """The preset for ``name``: a run's own, a built-in one, one of a family's ids
    (``ALE/Breakout-v5``, or an ALE game's bare name, ``Breakout``: the atari family's
    settings, no threshold); any other name is taken as a plain gymnasium id."""
    found = _REGISTERED.get(name) or PRESETS.get(name)
    if found is not None:
        return found
    if name in _BY_GYM_ID:
        return dataclasses.replace(_BY_GYM_ID[name], name=name)
    gym_id = ALE_ID.format(name) if _bare_name(name) else name
    for pattern, family in FAMILY_IDS.items():
        if fnmatch.fnmatchcase(gym_id, pattern) and (gym_id == name or _ale_game(gym_id)):
            return dataclasses.replace(family, name=name, gym_id=gym_id)
    return EnvPreset(name, None, gym_id=name)


def _bare_name(name: str) -> bool:
    """A name no gymnasium id has: no version, namespace or entry point."""
    return name.isidentifier() and "-v" not in name


def _ale_game(gym_id: str) -> bool:
    """Whether ale-py (the atari extra) has ``gym_id``: asked only of a bare name."""
    try:
        import ale_py
        import gymnasium as gym
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return gym_id in gym.registry


def preset_of_file(values: dict, env: str, source: str) -> EnvPreset:
    """The preset a run config's ``[preset]`` table defines for its ``env``: the table is
    an ``envs`` entry's (``id``, ``solved_return``) plus the file's ``family``, and the
    run config itself is its settings.

    Raises:
        ConfigError: what is wrong with the table.
    """
    table = dict(values)
    family = table.pop("family", "gymnasium")
    (chosen,) = read_presets({"family": family, "envs": {env: table}}, f"{source} [preset]")
    return chosen
