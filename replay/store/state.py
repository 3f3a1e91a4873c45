"""A store's state as a snapshot holds it, and the checks when it comes back.

Every stateful part of a shard (storage, sum-tree, replay, rate limiter, counters) gives its
state as ``(arrays, meta)``: the arrays it keeps, by name (written as they are, never
copied first: a snapshot is written by a forked child, see ``replay.server.snapshots``),
and a JSON-able dict of its scalars and of the settings it was built with. It takes a state
back with ``restore(read, meta)``, reading each array straight into its own buffer; the
settings must match its own, or the snapshot is refused (:class:`SnapshotError`). An array
may be given as :class:`Rows`, the rows in use: a snapshot is sized by what a store holds,
and the rows left out keep, on restore, the values the fresh store was built with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from replay.errors import SnapshotError


@dataclass(frozen=True)
class Rows:
    """The rows of ``array`` (along its first axis) a snapshot keeps: ``ranges`` of
    ``(start, stop)``, in order and apart; the others are not written, and a restore
    leaves them as the restoring store built them."""

    array: np.ndarray
    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def prefix(cls, array: np.ndarray, rows: int) -> Rows:
        """The first ``rows`` rows (all of them, past the end)."""
        return cls(array, ((0, min(rows, len(array))),) if rows > 0 else ())


# ``read(name, out)``: the snapshot's array ``name``, read into ``out`` if given.
Reader = Callable[[str, "np.ndarray | None"], np.ndarray]


def prefixed(prefix: str, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{prefix}{name}": array for name, array in arrays.items()}


def sub_reader(read: Reader, prefix: str) -> Reader:
    return lambda name, out=None: read(f"{prefix}{name}", out)


def json_like(value: object) -> object:
    """``value`` as it comes back from JSON (tuples as lists), to compare settings."""
    return json.loads(json.dumps(value))


def require_same(found: object, expected: Mapping[str, object], what: str) -> None:
    """Refuses a snapshot whose ``found`` settings are not ``expected``, naming each."""
    if not isinstance(found, Mapping):
        raise SnapshotError(f"{what}: the snapshot has no settings")
    differ = [
        f"{key}: snapshot {found.get(key)!r}, here {value!r}"
        for key, value in expected.items()
        if found.get(key) != value
    ]
    if differ:
        raise SnapshotError(f"{what} was built differently: " + "; ".join(differ))


def meta_int(meta: Mapping[str, object], key: str) -> int:
    """``meta[key]``, an integer ``>= 0``."""
    return meta_counts([meta.get(key)], 1)[0]


def meta_counts(values: object, length: int) -> list[int]:
    """``values``: a list of ``length`` integers >= 0 (counters in a snapshot)."""
    if (
        not isinstance(values, list)
        or len(values) != length
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)
    ):
        raise SnapshotError(f"counters in the snapshot are malformed: {values!r:.100}")
    return values
