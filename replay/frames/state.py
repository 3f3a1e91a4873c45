"""A frame store's state for a snapshot, and taking it back: the half of
``replay.frames.storage.FrameStackStorage`` that snapshots (as ``replay.frames.reading`` is the
half that reads). Sized by what the store holds (``replay.store.state.Rows``): transition and
frame slots fill in order from 0 (the first ones until the ring wraps), stream rows
likewise, and of the byte ring only the stretch the held frames lie in.
"""

from __future__ import annotations

import numpy as np

from replay.frames.kernels import NEXT_GEN, NEXT_POSITION, OLDEST_GEN
from replay.frames.spec import FrameStackSpec, StreamIds
from replay.store.state import Reader, Rows, json_like, meta_counts, meta_int, require_same

# Which of the store's arrays are per frame slot and per stream row (the others, but the
# arena and cursor, are per transition slot): a snapshot writes the rows in use of each.
_PER_FRAME = frozenset(
    {
        "positions",
        "lengths",
        "frame_stream",
        "frame_number",
        "frame_gen",
        "prev",
        "prev_gen",
        "depth",
        "refs",
    }
)
_PER_STREAM = frozenset({"table", "stream_newest"})
# The arrays of head frames by stack field (a transition's names from before unrolls).
_HEAD_NAMES = {"obs": "obs_head", "next_obs": "next_head"}


class FrameStackState:
    """Snapshots the arrays a :class:`~replay.frames.storage.FrameStackStorage` keeps."""

    _spec: FrameStackSpec
    _capacity: int
    _compress: bool
    _arena: np.ndarray
    _positions: np.ndarray
    _lengths: np.ndarray
    _frame_stream: np.ndarray
    _frame_number: np.ndarray
    _frame_gen: np.ndarray
    _prev: np.ndarray
    _prev_gen: np.ndarray
    _depth: np.ndarray
    _refs: np.ndarray
    _cursor: np.ndarray
    _table: np.ndarray
    _stream_newest: np.ndarray
    _heads: dict[str, np.ndarray]
    _generations: np.ndarray
    _scalar_columns: dict[str, np.ndarray]
    _next_generation: int
    _live: int
    _oldest: int
    evicted_early: int
    streams: StreamIds
    slots_touched: int

    def _arrays(self) -> dict[str, np.ndarray]:
        named = {
            "arena": self._arena,
            "positions": self._positions,
            "lengths": self._lengths,
            "frame_stream": self._frame_stream,
            "frame_number": self._frame_number,
            "frame_gen": self._frame_gen,
            "prev": self._prev,
            "prev_gen": self._prev_gen,
            "depth": self._depth,
            "refs": self._refs,
            "cursor": self._cursor,
            "table": self._table,
            "stream_newest": self._stream_newest,
            "generations": self._generations,
        }
        heads = {_HEAD_NAMES.get(name, f"{name}_head"): a for name, a in self._heads.items()}
        return {**named, **heads, **{f"field.{k}": v for k, v in self._scalar_columns.items()}}

    def _settings(self) -> dict[str, object]:
        spec = self._spec
        return {
            "kind": "frames",
            "capacity": self._capacity,
            "arena": int(self._arena.size),
            "frames": int(self._prev.size),
            "window": int(self._table.shape[1]),
            "streams": int(self._table.shape[0]),
            "compress": self._compress,
            "layout": [
                list(spec.frame_shape),
                str(spec.frame_dtype),
                spec.stack,
                spec.record_spec.to_dict(),
            ],
        }

    def state(self) -> tuple[dict[str, np.ndarray | Rows], dict]:
        """Arrays and scalars for a snapshot (``replay.store.state``): taken right after an add
        or a sample, so no early eviction is pending. Sized by what is held: transition
        and frame slots fill in order from 0 (the first ones until the ring wraps), stream
        rows likewise, and of the arena only the bytes of the frames held (one stretch of
        the byte ring, split where it wraps)."""
        counts = [self._next_generation, self._live, self._oldest, self.evicted_early]
        meta = {"settings": self._settings(), "counts": counts, "reclaimed": self.streams.reclaimed}
        frames_touched = min(int(self._cursor[NEXT_GEN]), self._prev.size)
        streams_touched = len(self.streams.ids_array())
        arrays: dict[str, np.ndarray | Rows] = {}
        for name, array in self._arrays().items():
            if name in _PER_FRAME:
                arrays[name] = Rows.prefix(array, frames_touched)
            elif name in _PER_STREAM:
                arrays[name] = Rows.prefix(array, streams_touched)
            elif name == "cursor":
                arrays[name] = array
            elif name == "arena":
                arrays[name] = Rows(array, self._arena_held())
            else:  # per transition slot
                arrays[name] = Rows.prefix(array, self.slots_touched)
        return {**arrays, "stream_ids": self.streams.ids_array()}, meta

    def _arena_held(self) -> tuple[tuple[int, int], ...]:
        """The arena's bytes from the oldest frame held to the next position: every
        frame held lies within (frames are placed in generation order and dropped oldest
        first); as one range, or two where the stretch wraps past the arena's end."""
        oldest, following = int(self._cursor[OLDEST_GEN]), int(self._cursor[NEXT_GEN])
        if oldest >= following:
            return ()
        size = self._arena.size
        start = int(self._positions[oldest % self._prev.size])
        length = min(int(self._cursor[NEXT_POSITION]) - start, size)
        first = start % size
        if first + length <= size:
            return ((first, first + length),)
        return ((0, first + length - size), (first, size))

    def restore(self, read: Reader, meta: dict) -> None:
        """Takes back a :meth:`state`.

        Raises:
            SnapshotError: a store built otherwise, or an unreadable array.
        """
        require_same(json_like(meta.get("settings")), json_like(self._settings()), "frame store")
        numbers = meta_counts(meta.get("counts"), 4)
        for name, array in self._arrays().items():
            read(name, array)
        self.streams.restore(read("stream_ids", None), meta_int(meta, "reclaimed"))
        self._next_generation, self._live, self._oldest, self.evicted_early = numbers
