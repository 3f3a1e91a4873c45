"""Storage for transitions whose observations are stacks of frames: every frame kept once.

An Atari transition carries ``obs`` and ``next_obs`` as stacks of ``k`` frames (4 of 84×84
bytes). Stored whole, each frame is kept ``2k`` times. Here each frame of a writer stream
(one env copy of one actor) is kept once, in a ring of frames, and a transition keeps only
two frame references: the newest frame of its ``obs`` stack and of its ``next_obs`` stack.
The stacks are put together when the transition is gathered.

Frames of a stream link to their predecessor (``prev``). A stack of ``k`` ending at frame
``f`` is ``[prev^(k-1)(f), ..., prev(f), f]``. The first frame of an episode links to
itself, so the stacks at an episode's start repeat its first frame, which is what
gymnasium's ``FrameStackObservation`` (``padding_type="reset"``, its default) gives. A frame
whose predecessor this shard never saw (the start of a stretch of a stream sent to this
shard, see ``replay.frame_messages``) links to itself too but has no history (``depth``
0): a transition whose stack would reach past it is refused, never filled with a wrong
frame.

Lifetime. A frame stays stored while any stored transition refers to it: every frame of a
transition's two stacks counts one reference (``refs``). Frames are written in a FIFO ring;
when the slot to write holds a referenced frame, the oldest stored transitions are evicted
first (their priorities go to zero and their generations to -1, so they are never sampled
again and late priority updates for them are dropped) until it is free. With the default
frame capacity this happens only when the streams outrun the transitions by far.
Transitions have their own FIFO ring of ``capacity`` slots, as ``RingStorage``.

Frames are found by ``(stream, frame number)``: each stream keeps a window of its newest
``window`` frame numbers. A reference to a number outside the window, never sent, or whose
frame was overwritten is refused (:class:`InvalidBatchError`), and the store is unchanged.

Not thread-safe: one owner (a shard's loop) calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from replay.errors import InvalidBatchError, InvalidIndexError
from replay.frame_kernels import (
    NO_HISTORY,
    STALE_FRAME,
    UNKNOWN_FRAME,
    count_refs,
    gather_stacks,
    link_frames,
    release,
    resolve_heads,
)
from replay.spec import FieldSpec, TransitionSpec
from replay.storage import BatchBuffers, read_only

# Frame numbers of a stream that stay findable by number (a record may refer back this far).
DEFAULT_WINDOW = 256
DEFAULT_MAX_STREAMS = 8192
_REASONS = {
    UNKNOWN_FRAME: "refers to a frame this shard does not hold (never sent, or out of the "
    "stream's window)",
    STALE_FRAME: "refers to a frame that has been overwritten",
    NO_HISTORY: "needs frames from before the first frame this shard holds of its stream",
}
RECORD_FIELDS = ("stream", "obs_frame", "next_obs_frame")


@dataclass(frozen=True)
class FrameStackSpec:
    """What a frame-stacked transition holds.

    Attributes:
        frame_shape: one frame's shape, e.g. ``(84, 84)``.
        frame_dtype: its dtype, e.g. ``uint8``.
        stack: frames per observation ``k``.
        scalars: the other fields of a transition (action, reward, discount, ...).
    """

    frame_shape: tuple[int, ...]
    frame_dtype: str
    stack: int
    scalars: TransitionSpec

    @property
    def record_spec(self) -> TransitionSpec:
        """What an actor sends per transition: its stream, two frame numbers, the scalars."""
        refs = [FieldSpec(name, (), "int64") for name in RECORD_FIELDS]
        return TransitionSpec([*refs, *self.scalars.values()])

    @property
    def transition_spec(self) -> TransitionSpec:
        """What the learner gets: ``obs`` and ``next_obs`` stacks, then the scalars."""
        shape = (self.stack, *self.frame_shape)
        stacks = [FieldSpec("obs", shape, self.frame_dtype)]
        stacks.append(FieldSpec("next_obs", shape, self.frame_dtype))
        return TransitionSpec([*stacks, *self.scalars.values()])

    @property
    def frame_nbytes(self) -> int:
        return int(np.prod(self.frame_shape)) * np.dtype(self.frame_dtype).itemsize


class FrameStackStorage:
    """A FIFO ring of frame-stacked transitions over a FIFO ring of frames.

    Args:
        spec: frame shape, stack size and the scalar fields.
        capacity: transitions kept.
        frame_capacity: frames kept; default ``capacity + capacity // 128 + 1024``. A step
            makes one frame and one transition, and the frames a transition needs are at
            most a few steps of its stream older than it; a frame ring about as long as
            the transition ring therefore frees its oldest frames as the oldest
            transitions go. If it runs short, the oldest transitions go a little early.
        window: frame numbers of a stream findable by number.
        max_streams: writer streams this store keeps apart; a new stream beyond it is
            refused.

    Raises:
        InvalidIndexError: a capacity, window or stream limit that is not positive.
    """

    def __init__(
        self,
        spec: FrameStackSpec,
        capacity: int,
        frame_capacity: int | None = None,
        window: int = DEFAULT_WINDOW,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        frame_capacity = frame_capacity or capacity + capacity // 128 + 1024
        for name, value in (
            ("capacity", capacity), ("frame_capacity", frame_capacity), ("window", window),
            ("max_streams", max_streams), ("stack", spec.stack),
        ):  # fmt: skip
            if not isinstance(value, (int, np.integer)) or not 0 < value < 2**31:
                raise InvalidIndexError(f"{name} must be an integer in [1, 2^31), got {value!r}")
        if spec.stack > 127:
            raise InvalidIndexError(f"stack must be at most 127, got {spec.stack}")
        self._spec = spec
        self._capacity = int(capacity)
        self._stack = int(spec.stack)
        self._frames = np.zeros((frame_capacity, spec.frame_nbytes), dtype=np.uint8)
        # Slots and streams fit 32 bits (checked above); generations and numbers do not.
        self._frame_stream = np.full(frame_capacity, -1, dtype=np.int32)
        self._frame_number = np.full(frame_capacity, -1, dtype=np.int64)
        self._frame_gen = np.full(frame_capacity, -1, dtype=np.int64)
        self._prev = np.arange(frame_capacity, dtype=np.int32)
        self._prev_gen = np.full(frame_capacity, -1, dtype=np.int64)
        self._depth = np.zeros(frame_capacity, dtype=np.int8)
        self._refs = np.zeros(frame_capacity, dtype=np.int32)
        self._frame_cursor = np.zeros(2, dtype=np.int64)  # next slot, next generation
        self._table = np.full((max_streams, window), -1, dtype=np.int32)
        self._streams: dict[int, int] = {}
        self._max_streams = int(max_streams)
        self._scalar_columns = {
            name: np.zeros((self._capacity, *f.shape), dtype=f.dtype)
            for name, f in spec.scalars.items()
        }
        self._obs_head = np.zeros(self._capacity, dtype=np.int32)
        self._next_head = np.zeros(self._capacity, dtype=np.int32)
        self._generations = np.full(self._capacity, -1, dtype=np.int64)
        self._next_generation = 0
        self._live = 0
        self._oldest = 0  # no live transition has a smaller generation
        self._evicted: list[np.ndarray] = []
        self.evicted_early = 0
        """Transitions evicted before their turn, to free a frame slot."""

    # -- what PrioritizedReplay needs of a storage ----------------------------------------

    @property
    def spec(self) -> TransitionSpec:
        """What is written per transition (the records)."""
        return self._spec.record_spec

    @property
    def output_spec(self) -> TransitionSpec:
        """What :meth:`gather` returns."""
        return self._spec.transition_spec

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def size(self) -> int:
        """Transitions stored and alive."""
        return self._live

    @property
    def items_written(self) -> int:
        return self._next_generation

    @property
    def generations(self) -> np.ndarray:
        """Per-slot generation, -1 for empty or evicted slots. Read-only."""
        return read_only(self._generations)

    @property
    def frames_stored(self) -> int:
        return int(min(self._frame_cursor[1], self._frames.shape[0]))

    @property
    def nbytes(self) -> int:
        """Bytes of every array this store keeps (frames, links, indices, records)."""
        arrays = [
            self._frames, self._frame_stream, self._frame_number, self._frame_gen, self._prev,
            self._prev_gen, self._depth, self._refs, self._table, self._obs_head,
            self._next_head, self._generations, *self._scalar_columns.values(),
        ]  # fmt: skip
        return sum(a.nbytes for a in arrays)

    def take_evicted(self) -> np.ndarray:
        """Slots of transitions evicted early since the last call (their priorities must
        go to zero)."""
        if not self._evicted:
            return np.empty(0, dtype=np.int64)
        slots = np.concatenate(self._evicted)
        self._evicted = []
        return slots

    # -- writing ------------------------------------------------------------------------

    def add_frames(self, streams: np.ndarray, numbers: np.ndarray, starts: np.ndarray,
                   frames: np.ndarray) -> np.ndarray:  # fmt: skip
        """Stores frames, each once; a frame already held is skipped.

        Args:
            streams: int64 writer stream of each frame (any id the writer picks, unique
                per env copy and writer incarnation).
            numbers: int64 frame number within its stream (consecutive within an episode).
            starts: bool, True for the first frame of an episode.
            frames: ``(m, *frame_shape)`` of the frame dtype.

        Returns:
            int64 frame slot of each frame.

        Raises:
            InvalidBatchError: wrong shapes or dtypes, negative numbers, or a new stream
                beyond ``max_streams``; the store is then unchanged.
        """
        count = len(numbers)
        spec = self._spec
        expected = (count, *spec.frame_shape)
        if frames.shape != expected or frames.dtype != np.dtype(spec.frame_dtype):
            raise InvalidBatchError(
                f"frames are {frames.dtype}{frames.shape}, expected {spec.frame_dtype}{expected}"
            )
        streams, numbers = _int64(streams, count, "streams"), _int64(numbers, count, "numbers")
        starts = np.ascontiguousarray(starts, dtype=np.bool_).reshape(-1)
        if starts.size != count:
            raise InvalidBatchError(f"{starts.size} episode-start flags for {count} frames")
        if count and numbers.min() < 0:
            raise InvalidBatchError(f"frame number {numbers.min()} is negative")
        dense = self._dense_streams(streams, create=True)
        slots = np.empty(count, dtype=np.int64)
        new = np.zeros(count, dtype=np.bool_)
        flat = np.ascontiguousarray(frames).reshape(count, -1).view(np.uint8)
        done = 0
        while done < count:
            stopped = done + link_frames(
                dense[done:], numbers[done:], starts[done:], self._table, self._frame_stream,
                self._frame_number, self._frame_gen, self._prev, self._prev_gen, self._depth,
                self._refs, self._frame_cursor, self._stack, slots[done:], new[done:],
            )  # fmt: skip
            # A frame already held keeps its bytes: a resend must not rewrite a frame that
            # stored transitions refer to.
            placed = np.flatnonzero(new[done:stopped]) + done
            self._frames[slots[placed]] = flat[placed]
            done = stopped
            if done < count:
                self._evict_oldest()
        return slots

    def write(self, batch: Mapping[str, np.ndarray], count: int) -> np.ndarray:
        """Writes ``count`` records (validated against :attr:`spec` by the caller) whose
        frames were added before.

        Returns:
            int64 transition slots written, in record order (the last ``capacity`` records
            if more came: the earlier ones would be evicted by the same batch).

        Raises:
            InvalidBatchError: a record refers to a frame this store does not hold whole
                (see the module docstring); nothing is written then.
        """
        dense = self._dense_streams(np.asarray(batch["stream"]), create=False)
        heads = {}
        for name in ("obs_frame", "next_obs_frame"):
            slots = np.empty(count, dtype=np.int64)
            bad, reason = resolve_heads(
                dense, np.ascontiguousarray(batch[name], dtype=np.int64), self._table,
                self._frame_stream, self._frame_number, self._frame_gen, self._prev,
                self._prev_gen, self._depth, self._stack, slots,
            )  # fmt: skip
            if bad >= 0:
                raise InvalidBatchError(
                    f"record {bad} ({name} {batch[name][bad]} of stream "
                    f"{batch['stream'][bad]}) {_REASONS[reason]}"
                )
            heads[name] = slots
        kept = min(count, self._capacity)
        skip = count - kept
        first = self._next_generation + skip
        numbers = first + np.arange(kept, dtype=np.int64)
        slots = numbers % self._capacity
        self._live -= self._release(slots)
        obs_heads, next_heads = heads["obs_frame"][skip:], heads["next_obs_frame"][skip:]
        self._obs_head[slots] = obs_heads
        self._next_head[slots] = next_heads
        count_refs(obs_heads, self._prev, self._refs, self._stack, 1)
        count_refs(next_heads, self._prev, self._refs, self._stack, 1)
        for name, column in self._scalar_columns.items():
            column[slots] = batch[name][skip:]
        self._generations[slots] = numbers
        self._next_generation += count
        self._live += kept
        self._oldest = max(self._oldest, self._next_generation - self._capacity)
        return slots

    def _release(self, slots: np.ndarray) -> int:
        return release(
            slots, self._obs_head, self._next_head, self._generations, self._prev, self._refs,
            self._stack,
        )  # fmt: skip

    def _evict_oldest(self) -> None:
        """Evicts the oldest live transition (to free the frame slot the cursor needs)."""
        while self._oldest < self._next_generation:
            slot = self._oldest % self._capacity
            self._oldest += 1
            if self._generations[slot] >= 0:
                victim = np.array([slot], dtype=np.int64)
                self._live -= self._release(victim)
                self._evicted.append(victim)
                self.evicted_early += 1
                return
        raise InvalidBatchError("a frame slot is referenced by no stored transition")  # bug

    def _dense_streams(self, streams: np.ndarray, create: bool) -> np.ndarray:
        dense = np.empty(len(streams), dtype=np.int64)
        for value in np.unique(streams).tolist():
            index = self._streams.get(value)
            if index is None:
                if not create:
                    index = -1  # refused by resolve_heads as an unknown frame
                elif len(self._streams) >= self._max_streams:
                    raise InvalidBatchError(
                        f"stream {value} would be stream {len(self._streams) + 1}, beyond "
                        f"the {self._max_streams} this store keeps apart"
                    )
                else:
                    index = self._streams[value] = len(self._streams)
            dense[streams == value] = index
        return dense

    # -- reading ------------------------------------------------------------------------

    def allocate_batch(self, batch_size: int) -> BatchBuffers:
        """Contiguous per-field arrays of :attr:`output_spec` for ``batch_size`` items."""
        return BatchBuffers.allocate(self.output_spec, batch_size)

    def gather(self, slots: np.ndarray, out: BatchBuffers | None = None) -> dict[str, np.ndarray]:
        """The transitions at ``slots`` (live ones: callers pass sampled slots), with their
        stacks put together."""
        n = slots.size
        out = out or self.allocate_batch(n)
        if out.batch_size != n:
            raise InvalidIndexError(f"buffers hold {out.batch_size} items, {n} slots were given")
        for name, heads in (("obs", self._obs_head), ("next_obs", self._next_head)):
            target = out.fields[name].reshape(n, self._stack, -1).view(np.uint8)
            gather_stacks(self._frames, self._prev, heads[slots], self._stack, target)
        for name, column in self._scalar_columns.items():
            np.take(column, slots, axis=0, out=out.fields[name])
        return out.fields


def _int64(values: np.ndarray, count: int, name: str) -> np.ndarray:
    array = np.ascontiguousarray(values).reshape(-1)
    if array.size != count or array.dtype.kind not in "iu":
        raise InvalidBatchError(
            f"{name}: expected {count} integers, got {array.dtype}{array.shape}"
        )
    return array.astype(np.int64, copy=False)
