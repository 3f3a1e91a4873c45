"""``apex train --explain``: which rule chose a run's defaults, each value it chose and
why, and which of them the env's preset, the run's file or ``--set`` replaced."""

from __future__ import annotations

from pathlib import Path

from apex.algorithms.sized_defaults import SizedDefaults, cuda_asked, task_defaults
from apex.envs.presets import preset
from launch.config import RunConfig


def defaults_rule(config: RunConfig) -> SizedDefaults:
    """The sized-defaults rule as it applies to ``config``'s env and algorithm (empty
    where the env has preset settings)."""
    return task_defaults(config.env, config.algorithm, cuda_asked(config.to_dict()))


def start_line(config: RunConfig) -> str | None:
    """What the run's start says of its defaults; None where the preset's are used."""
    rule = defaults_rule(config)
    if not rule.said:
        return None
    return f"defaults: {rule.said} (what chose each: apex train --explain)"


def explain_lines(config: RunConfig) -> list[str]:
    rule = defaults_rule(config)
    if not rule.said:
        chosen = preset(config.env)
        where = _shown_path(chosen.source) or "the papers' settings: it has no preset file"
        return [
            f"defaults: {config.env}'s preset ({where}), under the algorithm's "
            "defaults.toml [run]; the sized rule (apex/algorithms/sized_defaults.py) is "
            "for a task without preset settings (--set preset.family=gymnasium puts the "
            "preset aside)"
        ]
    lines = [f"defaults: {rule.said}, by apex/algorithms/sized_defaults.py:"]
    resolved = config.to_dict()
    width = max(len(f"{name} = {_shown(value)}") for name, value, _ in rule.reasons)
    replaced = []
    for name, value, why in rule.reasons:
        lines.append(f"  {f'{name} = {_shown(value)}':<{width}}  {why}")
        now = _lookup(resolved, name)
        if _plain(now) != _plain(value):
            replaced.append(f"  {name} = {_shown(now)} (the rule's: {_shown(value)})")
    if replaced:
        lines.append("replaced by the env's preset for the algorithm, the run's file or --set:")
        lines += replaced
    lines.append("anything here can be set in the run's file or with --set SECTION.KEY=VALUE")
    return lines


def _lookup(values: dict, dotted: str) -> object:
    found: object = values
    for key in dotted.split("."):
        found = found.get(key) if isinstance(found, dict) else None
    return found


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _shown(value: object) -> str:
    value = _plain(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1_000:
        return f"{value:_}"
    return repr(value) if isinstance(value, str) else str(value)


def _shown_path(source: str) -> str:
    """A preset file's path from the repository's root where it lies inside it."""
    if not source:
        return ""
    root = Path(__file__).resolve().parents[1]
    path = Path(source).resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else source
