"""A user's own code named by an entry point, ``"package.module:function"``: an env
factory (``[env] make``) or a network factory (``learner.network``), imported in every
role's process that needs it."""

from __future__ import annotations

import importlib
from collections.abc import Callable


class EntryPointError(ValueError):
    """An entry point that is malformed, cannot be imported, or names nothing callable."""


def load_entry_point(text: str, what: str) -> Callable:
    """The callable ``text`` names (``what``: the setting, for the message).

    Raises:
        EntryPointError: the form, the import's failure, or what it found instead.
    """
    module_name, sep, attribute = text.partition(":")
    if not sep or not module_name or not attribute:
        raise EntryPointError(f"{what} {text!r} is not package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EntryPointError(f"{what} {text!r}: cannot import {module_name}: {exc}") from exc
    found = module
    for part in attribute.split("."):
        if part not in vars(found):
            raise EntryPointError(f"{what} {text!r}: {module_name} has no {attribute}")
        found = vars(found)[part]
    if not callable(found):
        raise EntryPointError(f"{what} {text!r} is a {type(found).__name__}, not callable")
    return found
