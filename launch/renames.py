"""Settings that changed their name or place: what a config file written before says is
read as what it says now, with a notice, so a run directory written before still resumes
(``launch.config.resolve`` applies them before anything else)."""

from __future__ import annotations

import logging
from dataclasses import fields

from apex.algorithms.registry import ALGORITHMS

logger = logging.getLogger(__name__)

# Settings that were renamed and are refused with their new name: old -> new.
RENAMED = {"actor.max_in_flight": "actor.insert_credit"}
# Settings that moved: still read, with a notice, as the new (a run directory written
# before resumes).
MOVED = {
    "learner.target_update_period": "dqn.target_update_period",
    **{
        f"learner.{key}": f"dpg.{key}"
        for key in ("tau", "twin_critics", "policy_delay", "target_noise", "noise_clip")
    },
    # Each algorithm's section was the learner's.
    **{
        f"learner.{builder.name}.{f.name}": f"{builder.name}.{f.name}"
        for builder in ALGORITHMS
        for f in fields(builder.settings_type)
    },
    "actor.epsilon": "dqn.epsilon",
    "actor.noise_scale": "dpg.noise_scale",
    "actor.unroll_length": "impala.unroll_length",
    "learner.cuda_graph": "dqn.cuda_graph",  # only DQN's update is graphed
}
# Settings that no longer exist, with what took their place: dropped with a notice, so a
# run directory written before still resumes.
_NO_MARGIN = "the margin loss that held DQN's greedy actions is gone"
# What a run did past its solve to stay solved (an averaged policy, a restart from the
# confirmed weights, going back to them, a step size of its own): measured on Acrobot and
# LunarLander, it kept neither more solved than training on as before.
_NO_RECIPE = (
    "a run that trains on past its solve goes on as before it (the stays-solved settings are gone)"
)
_SOLVED_KEYS = (
    "learning_rate",
    "settle_return",
    "policy_average",
    "average_from_solve",
    "restart",
    "back_to_confirmed",
    "follow_better",
    "follow_margin",
)
_DQN_SOLVED_KEYS = (
    "policy_average",
    "average_from_solve",
    "restart_at_solve",
    "back_to_anchor",
    "follow_better_confirmations",
    "follow_margin",
)
RETIRED = {
    "learner.eval_interval_s": "evaluations follow env steps now (learner.eval_every_steps)",
    "learner.dqn.anchor_margin": _NO_MARGIN,
    "learner.dqn.anchor_weight": _NO_MARGIN,
    "learner.learning_rate_solved": _NO_RECIPE,
    "learner.settle_return": _NO_RECIPE,
    **{f"learner.solved.{key}": _NO_RECIPE for key in _SOLVED_KEYS},
    **{f"learner.dqn.{key}": _NO_RECIPE for key in _DQN_SOLVED_KEYS},
}


def _pop(values: dict, path: list[str]) -> tuple[dict, object]:
    """``values`` without the setting at ``path`` (tables left empty dropped), and its value."""
    head, *rest = path
    if not rest:
        return {k: v for k, v in values.items() if k != head}, values[head]
    inner, value = _pop(values[head], rest)
    kept = {k: v for k, v in values.items() if k != head}
    return ({**kept, head: inner} if inner else kept), value


def _has(values: object, path: list[str]) -> bool:
    for part in path:
        if not isinstance(values, dict) or part not in values:
            return False
        values = values[part]
    return True


def _put(values: dict, path: list[str], value: object) -> dict:
    """``values`` with ``value`` at ``path`` unless a setting is already there."""
    head, *rest = path
    if not rest:
        return values if head in values else {**values, head: value}
    inner = values.get(head, {})
    return {**values, head: _put(inner if isinstance(inner, dict) else {}, rest, value)}


def moved(values: dict) -> dict:
    """``values`` with the settings of :data:`MOVED` in their new places, each with a
    notice; a setting given in both places keeps the new one. Those of :data:`RETIRED`
    are dropped, with a notice."""
    for old, why in RETIRED.items():
        if _has(values, old.split(".")):
            logger.warning("%s is no longer read: %s", old, why)
            values, _ = _pop(values, old.split("."))
    for old, new in MOVED.items():
        if not _has(values, old.split(".")):
            continue
        logger.warning("%s is now %s; read as that (rename it to silence this)", old, new)
        values, value = _pop(values, old.split("."))
        values = _put(values, new.split("."), value)
    return values


def refuse_renamed(values: dict, problems: list[str]) -> dict:
    """``values`` without the settings of :data:`RENAMED`, each refused in ``problems``
    with its new name."""
    for old, new in RENAMED.items():
        section, key = old.split(".")
        if key in values.get(section, {}):
            problems.append(f"{old} was renamed to {new}")
            kept = {k: v for k, v in values[section].items() if k != key}
            values = {**values, section: kept}
    return values
