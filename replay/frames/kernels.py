"""The numba kernels of ``replay.frames.storage``: linking frames, checking and counting
references to them, and putting stacks together; and ``stack_rows``, which puts a sample
reply's stacks together (``replay.frames.payload``, which imports it when it decodes, so
that a process that only sends, such as a CartPole actor, does not import numba). Pure
functions over the store's arrays; the store's docstring says what the arrays mean."""

from __future__ import annotations

import numpy as np
from numba import njit

from replay.store.prefetch import FRAMES_AHEAD, prefetch_range

# Refusal codes of resolve_heads (0: fine), and what each means.
UNKNOWN_FRAME, STALE_FRAME, NO_HISTORY = 1, 2, 3
REASONS = {
    UNKNOWN_FRAME: "refers to a frame this shard does not hold (never sent, or out of the "
    "stream's window)",
    STALE_FRAME: "refers to a frame that has been overwritten",
    NO_HISTORY: "needs frames from before the first frame this shard holds of its stream",
}


# Fields of the store's cursor array.
# ... and the arena bytes the held frames take, kept as frames come and go: an INFO must not
# scan the whole ring.
NEXT_GEN, OLDEST_GEN, NEXT_POSITION, BYTES_HELD = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def link_frames(
    dense: np.ndarray,
    numbers: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    table: np.ndarray,
    frame_stream: np.ndarray,
    frame_number: np.ndarray,
    frame_gen: np.ndarray,
    prev: np.ndarray,
    prev_gen: np.ndarray,
    depth: np.ndarray,
    refs: np.ndarray,
    positions: np.ndarray,
    frame_length: np.ndarray,
    stream_newest: np.ndarray,
    cursor: np.ndarray,
    arena_bytes: int,
    stack: int,
    out_slots: np.ndarray,
    out_new: np.ndarray,
) -> int:
    """Places frames ``i`` (stream ``dense[i]``, number ``numbers[i]``, ``lengths[i]``
    bytes stored) and links them.

    Frame ``g`` (every frame ever placed, counted from 0) takes slot ``g % slots`` and the
    next ``lengths[i]`` bytes of the arena, counted as ever-growing positions (byte ``p``
    lives at ``p % arena_bytes``; a frame that would straddle the end starts at the next
    lap). Placing it drops the oldest frames whose slot it takes or whose bytes it covers:
    the oldest frame, starting at ``s``, is covered while ``s < p + length − arena_bytes``.

    A frame already held (same stream and number, not dropped) is not stored again:
    ``out_slots[i]`` is its slot and ``out_new[i]`` False. Stops, returning ``i``, at the
    first frame that would drop a referenced frame (the caller evicts the oldest
    transition and calls again from ``i``); returns ``len(numbers)`` when done."""
    slots = prev.size
    window = table.shape[1]
    for i in range(numbers.size):
        stream = dense[i]
        number = numbers[i]
        held = table[stream, number % window]
        if held >= 0 and frame_stream[held] == stream and frame_number[held] == number:
            out_slots[i] = held
            out_new[i] = False
            continue
        length = lengths[i]
        position = cursor[NEXT_POSITION]
        if position % arena_bytes + length > arena_bytes:
            position = (position // arena_bytes + 1) * arena_bytes
        generation = cursor[NEXT_GEN]
        while cursor[OLDEST_GEN] < generation:
            oldest = cursor[OLDEST_GEN] % slots
            if not (
                cursor[OLDEST_GEN] <= generation - slots
                or positions[oldest] < position + length - arena_bytes
            ):
                break
            if refs[oldest] > 0:
                return i
            frame_stream[oldest] = -1
            frame_gen[oldest] = -1
            cursor[OLDEST_GEN] += 1
            cursor[BYTES_HELD] -= frame_length[oldest]
        slot = generation % slots
        cursor[NEXT_GEN] = generation + 1
        cursor[NEXT_POSITION] = position + length
        cursor[BYTES_HELD] += length
        frame_stream[slot] = stream
        frame_number[slot] = number
        frame_gen[slot] = generation
        positions[slot] = position
        frame_length[slot] = length
        stream_newest[stream] = generation
        before = table[stream, (number - 1) % window]
        linked = (
            not starts[i]
            and before >= 0
            and frame_stream[before] == stream
            and frame_number[before] == number - 1
        )
        if linked:
            prev[slot] = before
            prev_gen[slot] = frame_gen[before]
            depth[slot] = min(depth[before] + 1, stack - 1)
        else:
            prev[slot] = slot
            prev_gen[slot] = generation
            # An episode's first frame has its whole (repeated) history; a frame whose
            # predecessor was never seen here has none.
            depth[slot] = stack - 1 if starts[i] else 0
        table[stream, number % window] = slot
        out_slots[i] = slot
        out_new[i] = True
    return numbers.size


@njit(cache=True, nogil=True)
def copy_blobs(
    arena: np.ndarray,
    positions: np.ndarray,
    slots: np.ndarray,
    new: np.ndarray,
    data: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
) -> None:
    """Copies blob ``data[starts[i] : starts[i] + lengths[i]]`` to the arena at its frame's
    position, for each frame ``i`` that was newly placed."""
    capacity = arena.size
    for i in range(slots.size):
        if not new[i]:
            continue
        start = positions[slots[i]] % capacity
        source = data[starts[i] : starts[i] + lengths[i]]
        destination = arena[start : start + source.size]
        for k in range(source.size):
            destination[k] = source[k]


@njit(cache=True, nogil=True)
def resolve_heads(
    dense: np.ndarray,
    numbers: np.ndarray,
    table: np.ndarray,
    frame_stream: np.ndarray,
    frame_number: np.ndarray,
    frame_gen: np.ndarray,
    prev: np.ndarray,
    prev_gen: np.ndarray,
    depth: np.ndarray,
    stack: int,
    out_slots: np.ndarray,
) -> tuple[int, int]:
    """Frame slots of ``(dense[i], numbers[i])``, each checked to head a whole stack of
    live frames. Returns ``(-1, 0)`` if all are fine, else ``(i, reason)`` of the first bad."""
    window = table.shape[1]
    for i in range(numbers.size):
        stream = dense[i]
        number = numbers[i]
        if stream < 0 or number < 0:
            return i, UNKNOWN_FRAME
        slot = table[stream, number % window]
        if slot < 0 or frame_stream[slot] != stream or frame_number[slot] != number:
            return i, UNKNOWN_FRAME
        if depth[slot] < stack - 1:
            return i, NO_HISTORY
        current = slot
        for _ in range(stack - 1):
            before = prev[current]
            if frame_gen[before] != prev_gen[current]:
                return i, STALE_FRAME
            current = before
        out_slots[i] = slot
    return -1, 0


@njit(cache=True, nogil=True)
def _count_stack(head: int, prev: np.ndarray, refs: np.ndarray, stack: int, step: int) -> None:
    """Adds ``step`` to the references of every frame of the stack ending at ``head``."""
    current = head
    for _ in range(stack):
        refs[current] += step
        current = prev[current]


@njit(cache=True, nogil=True)
def count_refs(heads: np.ndarray, prev: np.ndarray, refs: np.ndarray, stack: int, step: int):
    """Adds ``step`` to the references of every frame of the stacks headed by ``heads``."""
    for i in range(heads.size):
        _count_stack(heads[i], prev, refs, stack, step)


@njit(cache=True, nogil=True)
def gather_stacks(
    arena: np.ndarray,
    positions: np.ndarray,
    lengths: np.ndarray,
    prev: np.ndarray,
    heads: np.ndarray,
    stack: int,
    out: np.ndarray,
) -> None:
    """``out[b, j]`` = frame ``prev^(stack-1-j)(heads[b])``: the stack ending at each head,
    oldest first, copied from the arena (frames stored whole). ``out`` is
    ``(n, stack, frame bytes)``. ``lengths`` is unused: the LZ4 kernel's signature.

    The links are followed first, so that the frames after the one being copied can be
    prefetched (``replay.store.prefetch``)."""
    capacity = arena.size
    width = out.shape[2]
    total = heads.size * stack
    frames = np.empty((heads.size, stack), dtype=np.int64)
    chain_slots(prev, heads, stack, frames, 0)
    starts = positions[frames.reshape(-1)] % capacity
    base = arena.ctypes.data
    for i in range(min(FRAMES_AHEAD, total)):
        prefetch_range(base, starts[i], width)
    for i in range(total):
        if i + FRAMES_AHEAD < total:
            prefetch_range(base, starts[i + FRAMES_AHEAD], width)
        source = arena[starts[i] : starts[i] + width]
        destination = out[i // stack, i % stack]
        for x in range(width):
            destination[x] = source[x]


@njit(cache=True, nogil=True)
def chain_slots(prev: np.ndarray, heads: np.ndarray, stack: int, out: np.ndarray, column: int):
    """``out[b, column + j]`` = slot of frame ``prev^(stack-1-j)(heads[b])``, oldest first."""
    for b in range(heads.size):
        current = heads[b]
        for j in range(stack - 1, -1, -1):
            out[b, column + j] = current
            current = prev[current]


@njit(cache=True, nogil=True)
def copy_out_blobs(
    arena: np.ndarray,
    positions: np.ndarray,
    lengths: np.ndarray,
    slots: np.ndarray,
    offsets: np.ndarray,
    data: np.ndarray,
) -> None:
    """Blob of frame ``slots[i]`` into ``data[offsets[i]:offsets[i + 1]]``."""
    capacity = arena.size
    for i in range(slots.size):
        start = positions[slots[i]] % capacity
        destination = data[offsets[i] : offsets[i + 1]]
        source = arena[start : start + destination.size]
        for k in range(destination.size):
            destination[k] = source[k]


@njit(cache=True, nogil=True)
def stack_rows(frames: np.ndarray, index: np.ndarray, out: np.ndarray):
    """``out[b, j] = frames[index[b, j]]`` (rows of bytes): the stacks, one explicit copy
    loop (numpy's fancy indexing of 7 KB rows measured slower)."""
    width, nbytes = index.shape[1], frames.shape[1]
    base, total = frames.ctypes.data, index.shape[0] * width
    for i in range(total):
        if i + FRAMES_AHEAD < total:
            ahead = index[(i + FRAMES_AHEAD) // width, (i + FRAMES_AHEAD) % width]
            prefetch_range(base, ahead * nbytes, nbytes)
        source = frames[index[i // width, i % width]]
        destination = out[i // width, i % width]
        for x in range(nbytes):
            destination[x] = source[x]
