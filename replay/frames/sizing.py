"""How big a frame store is: its default window, stream limit and arena, and the bytes a
store of a given capacity allocates (what a run's preflight adds up before any shard
starts)."""

from __future__ import annotations

import math

from replay.frames.spec import FrameStackSpec

# Frame numbers of a stream that stay findable by number (a record may refer back this far):
# at least this many, and for items of many steps four items' worth (``default_window``).
DEFAULT_WINDOW = 256
DEFAULT_MAX_STREAMS = 8192
# Arena bytes per frame slot when compressed: a Pong frame takes 245 bytes on average.
DEFAULT_COMPRESSED_FRAME_BYTES = 640


# Per frame slot: position, length, stream, number, generation, previous frame and its
# generation, depth, references (the arrays below).
FRAME_LINK_BYTES = 8 + 4 + 4 + 8 + 8 + 4 + 8 + 1 + 4


def default_window(spec: FrameStackSpec) -> int:
    """How far back a record may refer: a transition's stacks reach a few frames, an
    unroll's or sequence's ``steps`` and its stack; the window leaves the stream room to go
    on three items' worth before the record is taken (an actor sends a few items at once)."""
    return max(DEFAULT_WINDOW, 4 * ((spec.steps or 1) + spec.stack))


def store_sizes(
    spec: FrameStackSpec,
    capacity: int,
    frame_capacity: int | None,
    compress: bool,
    arena_bytes: int | None,
) -> tuple[int, int]:
    """Frame slots and arena bytes, the defaults where None is given."""
    # A step makes one frame: an unroll of T steps about T new ones.
    item_frames = capacity * (spec.steps or 1)
    frame_capacity = frame_capacity or item_frames + item_frames // 128 + 1024
    per_frame = DEFAULT_COMPRESSED_FRAME_BYTES if compress else spec.frame_nbytes
    return frame_capacity, arena_bytes or frame_capacity * per_frame


def planned_nbytes(spec: FrameStackSpec, capacity: int, compress: bool = False) -> int:
    """The bytes a store of ``capacity`` items allocates with its default frame capacity,
    arena, window and stream limit: the frames' arena and per-frame links, each item's
    scalars and head slots, and the stream table."""
    frames, arena = store_sizes(spec, int(capacity), None, compress, None)
    per_item = sum(f.item_nbytes for f in spec.scalars.values())
    per_item += sum(
        4 * math.prod(spec.record_spec[f"{name}_frame"].shape) for name, _ in spec.stack_fields
    )
    streams = DEFAULT_MAX_STREAMS * (default_window(spec) * 4 + 8)
    return arena + frames * FRAME_LINK_BYTES + int(capacity) * per_item + streams
