"""Type checks of a settings dataclass against its own annotations, for every config's
``problems``: a value of the wrong type is named as such ("must be a number, got 'abc'"),
never reported as a range error or left to fail deep inside a role.

What is checked, by annotation: ``int`` (an integer, not a bool), ``float`` (an int or a
float, not a bool), ``bool``, ``str``, ``tuple[X, ...]`` (each item), ``X | None``, and
``Literal[...]``. Other annotations (nested configs, specs) are their own code's to check.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing

_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _fits(value: object, hint: object) -> bool | None:
    """Whether ``value`` fits ``hint``; None when the hint is not one checked here."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        verdicts = [_fits(value, arm) for arm in typing.get_args(hint)]
        return None if None in verdicts else any(verdicts)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin is tuple:
        arguments = typing.get_args(hint)
        if len(arguments) != 2 or arguments[1] is not Ellipsis:
            return None
        if not isinstance(value, (tuple, list)):
            return False
        verdicts = [_fits(item, arguments[0]) for item in value]
        return None if None in verdicts else all(verdicts)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return None


def describe(hint: object) -> str:
    """What a hint allows, in words: ``an integer or none``, ``a list of integers``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return "none"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(hint))
    if origin is tuple:
        item = describe(typing.get_args(hint)[0])
        return f"a list of {item.removeprefix('an ').removeprefix('a ')}s"
    return _WORDS.get(hint, str(hint))


def type_problems(config: object, prefix: str = "") -> list[str]:
    """A problem for each field of the dataclass ``config`` whose value does not fit its
    annotation, naming the setting, the value and what is allowed."""
    hints = _hints(type(config))
    problems = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if _fits(value, hints[field.name]) is False:
            problems.append(
                f"{prefix}{field.name} must be {describe(hints[field.name])}, got {value!r}"
            )
    return problems


def checked(config: object, prefix: str, range_problems: typing.Callable[[], list[str]]):
    """Type problems first; range problems only for the fields whose type is right (a
    wrong type is reported once, as a type, not again as a range)."""
    typed = type_problems(config, prefix)
    mistyped = {problem.split(" ", 1)[0] for problem in typed}
    if not typed:
        return range_problems()
    try:
        ranged = range_problems()
    except TypeError:  # a range rule that compares a mistyped value
        ranged = []
    return typed + [p for p in ranged if p.split(" ", 1)[0] not in mistyped]


def alpha_problems(alpha: object, name: str = "alpha") -> list[str]:
    """The priority exponent's rule, shared by the store (``PrioritizedReplay``) and every
    config that sets it, so a run is refused before it starts for what a shard would
    refuse."""
    return not_negative({name: alpha})


def not_negative(named: dict[str, object]) -> list[str]:
    """A problem for each value that is not a finite number >= 0 (bools are not numbers)."""
    return [
        f"{name} must be a finite number >= 0, got {value!r}"
        for name, value in named.items()
        if not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not (math.isfinite(value) and value >= 0)
    ]


def not_positive_integers(named: dict[str, object]) -> list[str]:
    """A problem for each value that is not an integer > 0 (bools are not integers)."""
    return [
        f"{name} must be a positive integer, got {value!r}"
        for name, value in named.items()
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0
    ]


def named(config: object, prefix: str, names: tuple[str, ...]) -> dict[str, object]:
    """``{prefix + name: value}`` of ``config``'s fields ``names``, for the checks above."""
    return {f"{prefix}{name}": getattr(config, name) for name in names}


def in_unit_interval(name: str, value: object) -> list[str]:
    """A problem unless ``value`` is a number in [0, 1]."""
    if isinstance(value, (int, float)) and 0.0 <= value <= 1.0:
        return []
    return [f"{name} must be in [0, 1], got {value}"]


def positive_or_none(named: dict[str, object]) -> list[str]:
    """A problem for each value that is neither None nor a number > 0."""
    return [
        f"{name} must be > 0, got {value}"
        for name, value in named.items()
        if value is not None and not (isinstance(value, (int, float)) and value > 0)
    ]
