"""What a frame-stacked transition is made of, and the writer streams' ids."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from replay.errors import InvalidBatchError
from replay.store.spec import FieldSpec, TransitionSpec

# A transition's frame fields: its two stacks, one head frame each.
TRANSITION_STACKS = ("obs", "next_obs")


@dataclass(frozen=True)
class FrameStackSpec:
    """What a frame-stacked item holds: a transition (``obs`` and ``next_obs`` stacks) or,
    with ``steps``, an unroll (``obs`` of ``steps`` stacks, one per step of the unroll and
    its bootstrap observation: IMPALA's, ``apex.algorithms.impala.unrolls``).

    Each stack field ``f`` of the item is sent and stored as ``f_frame``: the number of
    the newest frame of each of its stacks (``()`` for one stack, ``(steps,)`` for an
    unroll's). Its *heads*, as the store calls those frames, are the item's
    :attr:`head_count` frames, in field order.

    Attributes:
        frame_shape: one frame's shape, e.g. ``(84, 84)``.
        frame_dtype: its dtype, e.g. ``uint8``.
        stack: frames per observation ``k``.
        scalars: the other fields of an item (action, reward, discount, ...).
        order: the order of the fields in :attr:`transition_spec` (default: the stacks,
            then the scalars).
        steps: None for transitions; an unroll's observations (``T + 1``).
    """

    frame_shape: tuple[int, ...]
    frame_dtype: str
    stack: int
    scalars: TransitionSpec
    order: tuple[str, ...] | None = None
    steps: int | None = None

    @functools.cached_property
    def stack_fields(self) -> tuple[tuple[str, int], ...]:
        """``(field, stacks per item)`` of each stack field, in head order."""
        if self.steps is None:
            return tuple((name, 1) for name in TRANSITION_STACKS)
        return (("obs", self.steps),)

    @property
    def head_count(self) -> int:
        """Stacks (head frames) per item."""
        return sum(count for _, count in self.stack_fields)

    # Derived specs are cached: a shard asks for them with every insert message.
    @functools.cached_property
    def record_spec(self) -> TransitionSpec:
        """What an actor sends per item: its stream, its heads' frame numbers, the scalars."""
        refs = [FieldSpec("stream", (), "int64")]
        refs += [
            FieldSpec(f"{name}_frame", () if self.steps is None else (count,), "int64")
            for name, count in self.stack_fields
        ]
        return TransitionSpec([*refs, *self.scalars.values()])

    @functools.cached_property
    def transition_spec(self) -> TransitionSpec:
        """What the learner gets: the stacks put together, then the scalars."""
        shape = (self.stack, *self.frame_shape)
        stacks = [
            FieldSpec(name, shape if self.steps is None else (count, *shape), self.frame_dtype)
            for name, count in self.stack_fields
        ]
        fields = {f.name: f for f in (*stacks, *self.scalars.values())}
        return TransitionSpec([fields[name] for name in self.order or fields])

    @classmethod
    def from_transition_spec(cls, spec: TransitionSpec) -> FrameStackSpec | None:
        """The frame layout of ``spec`` if its ``obs`` and ``next_obs`` are stacks of
        images (``(k, h, w[, c])``), or if it has no ``next_obs`` and its ``obs`` is an
        unroll's stacks (``(T + 1, k, h, w[, c])``); else None (vector observations stay
        whole)."""
        if "obs" not in spec:
            return None
        if "next_obs" not in spec:
            return cls._unroll_layout(spec)
        obs, following = spec["obs"], spec["next_obs"]
        if obs.shape != following.shape or obs.dtype != following.dtype or len(obs.shape) < 3:
            return None
        scalars = TransitionSpec([f for f in spec.values() if f.name not in ("obs", "next_obs")])
        return cls(tuple(obs.shape[1:]), obs.dtype.name, obs.shape[0], scalars, tuple(spec))

    @classmethod
    def _unroll_layout(cls, spec: TransitionSpec) -> FrameStackSpec | None:
        obs = spec["obs"]
        if len(obs.shape) < 4:
            return None
        scalars = TransitionSpec([f for f in spec.values() if f.name != "obs"])
        return cls(
            tuple(obs.shape[2:]),
            obs.dtype.name,
            obs.shape[1],
            scalars,
            tuple(spec),
            steps=obs.shape[0],
        )

    @functools.cached_property
    def frame_nbytes(self) -> int:
        return int(np.prod(self.frame_shape)) * np.dtype(self.frame_dtype).itemsize


class StreamIds:
    """Writer stream ids (any int64 a writer picks) as dense indices ``0, 1, ...``.

    Args:
        max_streams: ids kept apart at once.
        reclaim: when all are taken, returns the dense index of a stream that holds no
            frame any more (its row cleared), or None. A restarted actor brings new
            streams, so over a long run old ones must give their places back.
    """

    def __init__(self, max_streams: int, reclaim: Callable[[], int | None]) -> None:
        self._indices: dict[int, int] = {}
        self._ids: list[int] = []
        self._max_streams = int(max_streams)
        self._reclaim = reclaim
        self.reclaimed = 0

    def dense(self, streams: np.ndarray, create: bool) -> np.ndarray:
        """The dense index of each stream id; -1 for an unknown one unless ``create``.

        Raises:
            InvalidBatchError: a new stream while all ``max_streams`` hold frames.
        """
        dense = np.empty(len(streams), dtype=np.int64)
        # A message carries a few streams and many records: one pass per distinct id.
        for value in set(streams.tolist()):
            index = self._indices.get(value)
            if index is None:
                index = self._assign(value) if create else -1  # -1: refused as unknown
            dense[streams == value] = index
        return dense

    def ids_array(self) -> np.ndarray:
        """The ids in order of their dense index (for a snapshot)."""
        return np.array(self._ids, dtype=np.int64)

    def restore(self, ids: np.ndarray, reclaimed: int) -> None:
        """Takes back :meth:`ids_array` (distinct ids, at most ``max_streams``)."""
        values = [int(value) for value in ids.reshape(-1)]
        if len(values) > self._max_streams or len(set(values)) != len(values):
            raise InvalidBatchError(f"{len(values)} stream ids, not all distinct or too many")
        self._ids = values
        self._indices = {value: index for index, value in enumerate(values)}
        self.reclaimed = reclaimed

    def _assign(self, value: int) -> int:
        if len(self._ids) < self._max_streams:
            index = len(self._ids)
            self._ids.append(value)
        else:
            index = self._reclaim()
            if index is None:
                raise InvalidBatchError(
                    f"stream {value} is new, and all {self._max_streams} streams this store "
                    "keeps apart still hold frames"
                )
            del self._indices[self._ids[index]]
            self._ids[index] = value
            self.reclaimed += 1
        self._indices[value] = index
        return index


def as_int64(values: np.ndarray, count: int, name: str) -> np.ndarray:
    """``count`` integers as int64.

    Raises:
        InvalidBatchError: another count, or not integers.
    """
    array = np.ascontiguousarray(values).reshape(-1)
    if array.size != count or array.dtype.kind not in "iu":
        raise InvalidBatchError(
            f"{name}: expected {count} integers, got {array.dtype}{array.shape}"
        )
    return array.astype(np.int64, copy=False)
