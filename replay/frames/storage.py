"""Storage for items whose observations are stacks of frames: every frame kept once.

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
shard, see ``apex.acting.frame_writer``) links to itself too but has no history (``depth``
0): a transition whose stack would reach past it is refused, never filled with a wrong
frame.

Lifetime. A frame stays stored while any stored transition refers to it: every frame of a
transition's two stacks counts one reference (``refs``). Frames are written in a FIFO ring;
when the slot to write holds a referenced frame, the oldest stored transitions are evicted
first (their priorities go to zero and their generations to -1, so they are never sampled
again and late priority updates for them are dropped) until it is free. With the default
frame capacity this happens only when the streams outrun the transitions by far.
Transitions have their own FIFO ring of ``capacity`` slots, as ``RingStorage``.

An IMPALA unroll (``FrameStackSpec.steps``) is stored the same way with ``T + 1`` frame
references instead of two, one for the stack of each of its observations; consecutive
unrolls of a stream share their frames, so each frame is still kept (and sent) once. What
is said here of transitions holds for unrolls.

Frames are kept whole, or compressed with LZ4 (``compress=True``, see ``replay.frames.lz4_codec``):
each frame's bytes go into a FIFO byte ring (the arena) that is dropped from its oldest end
as it wraps, under the same rule (a referenced frame is never dropped). Stacks are decoded
in one numba kernel at gather time.

Frames are found by ``(stream, frame number)``: each stream keeps a window of its newest
``window`` frame numbers. A reference to a number outside the window, never sent, or whose
frame was overwritten is refused (:class:`InvalidBatchError`), and the store is unchanged.

Not thread-safe: one owner (a shard's loop) calls it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from replay.errors import InvalidBatchError, InvalidIndexError
from replay.frames.kernels import (
    BYTES_HELD,
    NEXT_GEN,
    OLDEST_GEN,
    REASONS,
    copy_blobs,
    count_refs,
    link_frames,
    resolve_heads,
)
from replay.frames.lz4_codec import compress_bound, kernels
from replay.frames.payload import check_blobs
from replay.frames.reading import FrameStackReader
from replay.frames.sizing import DEFAULT_MAX_STREAMS, default_window, store_sizes
from replay.frames.spec import FrameStackSpec, StreamIds, as_int64
from replay.frames.state import FrameStackState
from replay.store.parts import default_threads
from replay.store.spec import TransitionSpec
from replay.store.storage import RingSlots


class FrameStackStorage(FrameStackReader, FrameStackState, RingSlots):
    """A FIFO ring of frame-stacked transitions over a FIFO ring of frames.

    Args:
        spec: frame shape, stack size and the scalar fields.
        capacity: transitions kept.
        frame_capacity: frames kept; default ``capacity + capacity // 128 + 1024`` (for
            unrolls, ``capacity × (T + 1)`` in place of ``capacity``). A step
            makes one frame and one transition, and the frames a transition needs are at
            most a few steps of its stream older than it; a frame ring about as long as
            the transition ring therefore frees its oldest frames as the oldest
            transitions go. If it runs short, the oldest transitions go a little early.
        window: frame numbers of a stream findable by number (default
            ``replay.frames.sizing.default_window``).
        max_streams: writer streams this store keeps apart at once; a new one beyond it
            takes the place of a stream that holds no frame any more, or is refused.
        compress: keep frames LZ4-compressed (decoded at gather time).
        arena_bytes: bytes of the frame arena; default ``frame_capacity`` whole frames, or
            ``frame_capacity × 640`` compressed. Frames that compress worse than that fill
            it first, and then the oldest transitions go early.
        gather_threads: threads that put a batch's stacks together (``replay.store.parts``).

    Raises:
        InvalidIndexError: a capacity, window or stream limit that is not positive.
    """

    def __init__(
        self,
        spec: FrameStackSpec,
        capacity: int,
        frame_capacity: int | None = None,
        window: int | None = None,
        max_streams: int = DEFAULT_MAX_STREAMS,
        compress: bool = False,
        arena_bytes: int | None = None,
        gather_threads: int | None = None,
    ) -> None:
        frame_capacity, arena_bytes = store_sizes(
            spec, capacity, frame_capacity, compress, arena_bytes
        )
        window = default_window(spec) if window is None else window
        for name, value in (
            ("capacity", capacity),
            ("frame_capacity", frame_capacity),
            ("window", window),
            ("max_streams", max_streams),
            ("stack", spec.stack),
        ):
            if not isinstance(value, (int, np.integer)) or not 0 < value < 2**31:
                raise InvalidIndexError(f"{name} must be an integer in [1, 2^31), got {value!r}")
        if spec.stack > 127:
            raise InvalidIndexError(f"stack must be at most 127, got {spec.stack}")
        self._compress = bool(compress)
        self._largest_blob = compress_bound(spec.frame_nbytes) if compress else spec.frame_nbytes
        if arena_bytes < self._largest_blob:
            raise InvalidIndexError(
                f"arena_bytes {arena_bytes} cannot hold one frame ({self._largest_blob} bytes)"
            )
        self._codec = kernels() if compress else None
        self._gather_threads = gather_threads or default_threads()
        self._spec = spec
        self._capacity = int(capacity)
        self._stack = int(spec.stack)
        self._arena = np.zeros(arena_bytes, dtype=np.uint8)
        self._positions = np.zeros(frame_capacity, dtype=np.int64)  # ever-growing byte count
        self._lengths = np.zeros(frame_capacity, dtype=np.int32)
        # Slots and streams fit 32 bits (checked above); generations and numbers do not.
        self._frame_stream = np.full(frame_capacity, -1, dtype=np.int32)
        self._frame_number = np.full(frame_capacity, -1, dtype=np.int64)
        self._frame_gen = np.full(frame_capacity, -1, dtype=np.int64)
        self._prev = np.arange(frame_capacity, dtype=np.int32)
        self._prev_gen = np.full(frame_capacity, -1, dtype=np.int64)
        self._depth = np.zeros(frame_capacity, dtype=np.int8)
        self._refs = np.zeros(frame_capacity, dtype=np.int32)
        self._cursor = np.zeros(4, dtype=np.int64)  # see frame_kernels.NEXT_GEN ...
        self._table = np.full((max_streams, window), -1, dtype=np.int32)
        # Generation of each stream's newest frame: a stream whose newest frame is older
        # than the oldest frame held has nothing left here, and may give its place back.
        self._stream_newest = np.full(max_streams, -1, dtype=np.int64)
        self.streams = StreamIds(max_streams, self._reclaim_stream)  # writer ids -> rows
        self._scalar_columns = {
            name: np.zeros((self._capacity, *f.shape), dtype=f.dtype)
            for name, f in spec.scalars.items()
        }
        # Per stack field, the slot of each item's head frames (an unroll's: one a step).
        self._heads = {
            name: np.zeros((self._capacity, *spec.record_spec[f"{name}_frame"].shape), np.int32)
            for name, _ in spec.stack_fields
        }
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
    def size(self) -> int:
        """Transitions stored and alive."""
        return self._live

    @property
    def frames_stored(self) -> int:
        """Frames held now."""
        return int(self._cursor[NEXT_GEN] - self._cursor[OLDEST_GEN])

    @property
    def frame_bytes_stored(self) -> int:
        """Arena bytes the held frames take (compressed, if compressed)."""
        return int(self._cursor[BYTES_HELD])

    @property
    def nbytes(self) -> int:
        """Bytes of every array this store keeps (frames, links, indices, records)."""
        return sum(a.nbytes for a in self._arrays().values())

    def take_evicted(self) -> np.ndarray:
        """Slots of transitions evicted early since the last call (their priorities must
        go to zero)."""
        if not self._evicted:
            return np.empty(0, dtype=np.int64)
        slots = np.concatenate(self._evicted)
        self._evicted = []
        return slots

    # -- writing ------------------------------------------------------------------------

    def store_frames(
        self,
        streams: np.ndarray,
        numbers: np.ndarray,
        starts: np.ndarray,
        frames: np.ndarray | None = None,
        data: np.ndarray | None = None,
        offsets: np.ndarray | None = None,
    ) -> np.ndarray:
        """:meth:`add_frames` for whole ``frames``, else :meth:`add_compressed_frames`."""
        if frames is not None:
            return self.add_frames(streams, numbers, starts, frames)
        return self.add_compressed_frames(streams, numbers, starts, data, offsets)

    @property
    def oldest_live(self) -> int:
        """No live item has a smaller generation (the ring's or an early eviction's)."""
        return self._oldest

    def add_frames(
        self, streams: np.ndarray, numbers: np.ndarray, starts: np.ndarray, frames: np.ndarray
    ) -> np.ndarray:
        """Stores frames, each once (compressing them if this store compresses); a frame
        already held is skipped.

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
        rows = np.ascontiguousarray(frames).reshape(count, -1).view(np.uint8)
        if self._compress:
            scratch = np.empty((count, self._largest_blob), dtype=np.uint8)
            lengths = np.empty(count, dtype=np.int64)
            self._codec.compress_rows(rows, scratch, lengths)
            data, offsets = scratch.reshape(-1), np.arange(count, dtype=np.int64) * scratch.shape[1]
        else:
            data, offsets = rows.reshape(-1), np.arange(count, dtype=np.int64) * rows.shape[1]
            lengths = np.full(count, rows.shape[1], dtype=np.int64)
        return self._place(streams, numbers, starts, data, offsets, lengths)

    def add_compressed_frames(
        self,
        streams: np.ndarray,
        numbers: np.ndarray,
        starts: np.ndarray,
        data: np.ndarray,
        offsets: np.ndarray,
    ) -> np.ndarray:
        """Stores frames compressed by the writer (LZ4 blocks), each checked by decoding it.

        Args:
            data: u8, the blobs one after another.
            offsets: int64 ``[m + 1]``: blob ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
            streams, numbers, starts: as in :meth:`add_frames`.

        Raises:
            InvalidBatchError: this store does not compress, offsets that do not cut
                ``data`` into ``m`` blobs, or a blob that does not decode to one frame.
        """
        if not self._compress:
            raise InvalidBatchError("this store keeps frames whole: send them uncompressed")
        count = len(numbers)
        data, offsets = check_blobs(data, offsets, count, self._largest_blob)
        nbytes = self._spec.frame_nbytes
        bad = self._codec.decompress_check(data, offsets, nbytes, np.empty(nbytes, dtype=np.uint8))
        if bad >= 0:
            raise InvalidBatchError(f"frame {bad} does not decode to {nbytes} bytes of frame")
        lengths = np.diff(offsets)
        return self._place(streams, numbers, starts, data, offsets[:-1], lengths)

    def _place(self, streams, numbers, starts, data, offsets, lengths) -> np.ndarray:
        count = len(numbers)
        streams, numbers = as_int64(streams, count, "streams"), as_int64(numbers, count, "numbers")
        starts = np.ascontiguousarray(starts, dtype=np.bool_).reshape(-1)
        if starts.size != count:
            raise InvalidBatchError(f"{starts.size} episode-start flags for {count} frames")
        if count and numbers.min() < 0:
            raise InvalidBatchError(f"frame number {numbers.min()} is negative")
        dense = self.streams.dense(streams, create=True)
        slots = np.empty(count, dtype=np.int64)
        new = np.zeros(count, dtype=np.bool_)
        done = 0
        while done < count:
            stopped = done + link_frames(
                dense[done:],
                numbers[done:],
                starts[done:],
                lengths[done:],
                self._table,
                self._frame_stream,
                self._frame_number,
                self._frame_gen,
                self._prev,
                self._prev_gen,
                self._depth,
                self._refs,
                self._positions,
                self._lengths,
                self._stream_newest,
                self._cursor,
                self._arena.size,
                self._stack,
                slots[done:],
                new[done:],
            )
            # A frame already held keeps its bytes: a resend must not rewrite a frame that
            # stored transitions refer to.
            copy_blobs(
                self._arena,
                self._positions,
                slots[done:stopped],
                new[done:stopped],
                data,
                offsets[done:stopped],
                lengths[done:stopped],
            )
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
        dense = self.streams.dense(np.asarray(batch["stream"]), create=False)
        heads = {}
        for name, per_item in self._spec.stack_fields:
            field = f"{name}_frame"
            numbers = np.ascontiguousarray(batch[field], dtype=np.int64).reshape(-1)
            slots = np.empty(numbers.size, dtype=np.int64)
            bad, reason = resolve_heads(
                np.repeat(dense, per_item),
                numbers,
                self._table,
                self._frame_stream,
                self._frame_number,
                self._frame_gen,
                self._prev,
                self._prev_gen,
                self._depth,
                self._stack,
                slots,
            )
            if bad >= 0:
                item = bad // per_item
                raise InvalidBatchError(
                    f"record {item} ({field} {numbers[bad]} of stream "
                    f"{batch['stream'][item]}) {REASONS[reason]}"
                )
            heads[name] = slots.reshape(count, *self._heads[name].shape[1:])
        kept = min(count, self._capacity)
        skip = count - kept
        first = self._next_generation + skip
        numbers = first + np.arange(kept, dtype=np.int64)
        slots = numbers % self._capacity
        self._live -= self._release(slots)
        for name, slots_of in heads.items():
            kept_heads = slots_of[skip:]
            self._heads[name][slots] = kept_heads
            count_refs(kept_heads.reshape(-1), self._prev, self._refs, self._stack, 1)
        for name, column in self._scalar_columns.items():
            column[slots] = batch[name][skip:]
        self._generations[slots] = numbers
        self._next_generation += count
        self._live += kept
        self._oldest = max(self._oldest, self._next_generation - self._capacity)
        return slots

    def _reclaim_stream(self) -> int | None:
        """A stream that holds no frame any more, its row of numbers cleared; or None."""
        gone = np.flatnonzero(self._stream_newest < self._cursor[OLDEST_GEN])
        if not gone.size:
            return None
        index = int(gone[np.argmin(self._stream_newest[gone])])
        self._table[index] = -1
        # Held from now on until its own frames age out.
        self._stream_newest[index] = self._cursor[NEXT_GEN]
        return index

    def _release(self, slots: np.ndarray) -> int:
        """Releases the frames of the live items at ``slots`` (distinct) and marks them
        dead; returns how many were alive."""
        live = slots[self._generations[slots] >= 0]
        for heads in self._heads.values():
            count_refs(heads[live].reshape(-1), self._prev, self._refs, self._stack, -1)
        self._generations[live] = -1
        return int(live.size)

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
