"""A store's state as a snapshot holds it, and the checks when it comes back.

Every stateful part of a shard (storage, sum-tree, replay, rate limiter, counters) gives its
state as ``(arrays, meta)``: the arrays it keeps, by name (written as they are, never
copied first: a snapshot is written by a forked child, see ``replay.shard_snapshots``),
and a JSON-able dict of its scalars and of the settings it was built with. It takes a state
back with ``restore(read, meta)``, reading each array straight into its own buffer; the
settings must match its own, or the snapshot is refused (:class:`SnapshotError`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import numpy as np

from replay.errors import SnapshotError

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
