"""Transition specs: which fields a replay store holds, with their per-item shape and dtype.

A spec is fixed when a store (or a shard) starts and is handed to every client, so a
misconfigured actor fails at start, not deep inside a run. Specs are plain, hashable,
immutable values and have a tiny dict form for configs and wire headers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from replay.errors import InvalidBatchError

# Only fixed-size numeric dtypes can travel as raw buffers and sit in a preallocated ring.
_ALLOWED_KINDS = frozenset("biuf")


@dataclass(frozen=True)
class FieldSpec:
    """One field of a transition.

    Attributes:
        name: field name, e.g. ``"obs"``.
        shape: per-transition shape, e.g. ``(4,)`` or ``(4, 84, 84)``; ``()`` for scalars.
        dtype: numpy dtype (native byte order, numeric or bool).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise InvalidBatchError(f"field name {self.name!r} is not a valid identifier")
        try:
            shape = tuple(int(d) for d in self.shape)
        except TypeError as exc:
            raise InvalidBatchError(
                f"field {self.name!r}: shape {self.shape!r} is not a tuple"
            ) from exc
        if any(d < 0 for d in shape):
            raise InvalidBatchError(f"field {self.name!r}: negative dimension in shape {shape}")
        try:
            dtype = np.dtype(self.dtype)
        except TypeError as exc:
            raise InvalidBatchError(f"field {self.name!r}: unknown dtype {self.dtype!r}") from exc
        if dtype.kind not in _ALLOWED_KINDS or dtype.hasobject or dtype.fields is not None:
            raise InvalidBatchError(
                f"field {self.name!r}: dtype {dtype} is not a plain numeric or bool dtype"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype.newbyteorder("="))

    @cached_property
    def item_nbytes(self) -> int:
        """Bytes of one transition's value of this field."""
        return math.prod(self.shape) * self.dtype.itemsize

    def check_batch(self, array: object, batch_size: int | None = None) -> int:
        """Checks that ``array`` is a batch of this field and returns its length.

        Raises:
            InvalidBatchError: not an ndarray, wrong dtype, wrong per-item shape, or a length
                other than ``batch_size``.
        """
        if not isinstance(array, np.ndarray):
            raise InvalidBatchError(
                f"field {self.name!r}: expected a numpy array, got {type(array).__name__}"
            )
        if array.dtype != self.dtype:
            raise InvalidBatchError(
                f"field {self.name!r}: dtype {array.dtype} does not match the spec's {self.dtype}"
            )
        if array.ndim != len(self.shape) + 1 or array.shape[1:] != self.shape:
            raise InvalidBatchError(
                f"field {self.name!r}: shape {array.shape} is not (batch, *{self.shape})"
            )
        if batch_size is not None and array.shape[0] != batch_size:
            raise InvalidBatchError(
                f"field {self.name!r}: batch length {array.shape[0]} differs from {batch_size}"
            )
        return array.shape[0]


class TransitionSpec(Mapping[str, FieldSpec]):
    """An ordered, immutable set of :class:`FieldSpec`, keyed by name."""

    def __init__(self, fields: Iterable[FieldSpec]) -> None:
        ordered: dict[str, FieldSpec] = {}
        for field in fields:
            if field.name in ordered:
                raise InvalidBatchError(f"field {field.name!r} appears twice in the spec")
            ordered[field.name] = field
        if not ordered:
            raise InvalidBatchError("a transition spec needs at least one field")
        self._fields = ordered

    @classmethod
    def from_dict(cls, spec: Mapping[str, tuple[Iterable[int], object]]) -> TransitionSpec:
        """Builds a spec from ``{name: (shape, dtype)}``, e.g. ``{"obs": ((4,), "float32")}``."""
        fields = []
        for name, value in spec.items():
            try:
                shape, dtype = value
            except (TypeError, ValueError) as exc:
                raise InvalidBatchError(
                    f"field {name!r}: expected (shape, dtype), got {value!r}"
                ) from exc
            fields.append(FieldSpec(name, tuple(shape), np.dtype(dtype)))
        return cls(fields)

    def to_dict(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """The inverse of :meth:`from_dict`, with dtypes as strings (``"float32"``)."""
        return {f.name: (f.shape, f.dtype.name) for f in self._fields.values()}

    @cached_property
    def float_fields(self) -> tuple[str, ...]:
        """The fields of a floating dtype: the ones a NaN or an infinity can hide in."""
        return tuple(f.name for f in self._fields.values() if f.dtype.kind == "f")

    def check_finite(self, batch: Mapping[str, np.ndarray]) -> None:
        """Checks that no float field of a batch (checked by :meth:`check_batch`) holds a
        NaN or an infinity: a learner would train on it.

        Raises:
            InvalidBatchError: naming the first field that does.
        """
        for name in self.float_fields:
            if not np.isfinite(batch[name]).all():
                raise InvalidBatchError(f"field {name!r} holds a value that is not finite")

    @cached_property
    def item_nbytes(self) -> int:
        """Bytes of one whole transition (all fields, unpadded)."""
        return sum(f.item_nbytes for f in self._fields.values())

    def check_batch(self, batch: Mapping[str, np.ndarray]) -> int:
        """Checks names, dtypes, shapes and equal lengths; returns the batch length.

        This runs on every insert, so the passing case is a few attribute compares per
        field; the slow, descriptive checks run only once something is wrong.

        Raises:
            InvalidBatchError: naming the first missing, unknown or malformed field.
        """
        try:
            if len(batch) == len(self._fields):
                length = -1
                for name, field in self._fields.items():
                    array = batch[name]
                    if type(array) is not np.ndarray or array.dtype != field.dtype:
                        break
                    if length < 0:
                        length = array.shape[0] if array.ndim else -1
                    if array.shape[1:] != field.shape or array.shape[:1] != (length,):
                        break
                else:
                    return length
        except (KeyError, TypeError):
            return self._explain_bad_batch(batch)
        return self._explain_bad_batch(batch)

    def _explain_bad_batch(self, batch: Mapping[str, np.ndarray]) -> int:
        if not isinstance(batch, Mapping):
            raise InvalidBatchError(
                f"a batch must be a mapping of field arrays, got {type(batch).__name__}"
            )
        missing = [name for name in self._fields if name not in batch]
        unknown = [name for name in batch if name not in self._fields]
        if missing or unknown:
            raise InvalidBatchError(
                f"batch fields do not match the spec: missing {missing}, unknown {unknown}"
            )
        length: int | None = None
        for name, field in self._fields.items():
            length = field.check_batch(batch[name], length)
        return 0 if length is None else length

    def __getitem__(self, name: str) -> FieldSpec:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TransitionSpec):
            return NotImplemented
        return list(self._fields.values()) == list(other._fields.values())

    def __hash__(self) -> int:
        return hash(tuple(self._fields.values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={f.shape}:{f.dtype.name}" for f in self._fields.values())
        return f"TransitionSpec({inner})"
