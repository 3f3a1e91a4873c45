"""Frame-stacked transitions on the wire, both ways: writers' frames and records
(:class:`FrameInsert`, INSERT_FRAMES), and a frame shard's sampled frames
(:class:`FramePayload`, in SAMPLE_REPLY), each frame once.

A batch of 512 Pong transitions is 29 MB of stacks (8 frames of 7 KB each), but only about
3,600 distinct frames, 0.9 MB of them LZ4-compressed. A frame shard therefore answers
SAMPLE with the distinct frames as stored (LZ4 blocks, or whole) and, per item, the
indices of its ``obs`` and ``next_obs`` frames among them, oldest first; the receiver puts
the stacks together (``unpack``), so the shard neither decodes nor copies them and the
wire carries 30× less. A receiver with a device could put them together there instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from replay.errors import InvalidBatchError, ProtocolError
from replay.frames.spec import FrameStackSpec
from replay.store.parts import default_threads, run_in_parts
from replay.wire.layout import Kind, Message


def check_count(message: Message) -> None:
    """An insert's header count must be its number of priorities (one per transition):
    what a peer declares and what it sends agree, or the message is refused."""
    rows = message.arrays[-1].shape[0] if message.arrays[-1].ndim else None
    if message.count != rows:
        raise ProtocolError(
            f"{message.kind.name} declares {message.count} transitions but "
            f"carries {rows} priorities"
        )


@dataclass(frozen=True)
class FrameInsert:
    """New frames of the writer's streams, then records that refer to frames by number.

    Exactly one of ``frames`` (whole) and ``data``/``offsets`` (LZ4 blocks, blob ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``) is given.
    """

    streams: np.ndarray
    numbers: np.ndarray
    starts: np.ndarray
    records: Mapping[str, np.ndarray]
    priorities: np.ndarray
    frames: np.ndarray | None = None
    data: np.ndarray | None = None
    offsets: np.ndarray | None = None

    @property
    def compressed(self) -> bool:
        return self.frames is None

    def to_message(self, layout: FrameStackSpec, sender: int, sequence: int, version: int):
        payload = (
            (
                np.ascontiguousarray(self.data, dtype=np.uint8),
                np.ascontiguousarray(self.offsets, dtype=np.int64),
            )
            if self.compressed
            else (np.ascontiguousarray(self.frames),)
        )
        arrays = (
            np.ascontiguousarray(self.streams, dtype=np.int64),
            np.ascontiguousarray(self.numbers, dtype=np.int64),
            np.ascontiguousarray(self.starts, dtype=np.bool_),
            *payload,
            *(np.ascontiguousarray(self.records[name]) for name in layout.record_spec),
            np.ascontiguousarray(self.priorities, dtype=np.float64),
        )
        count = len(arrays[-1])
        scalar = 1.0 if self.compressed else 0.0
        return Message(Kind.INSERT_FRAMES, sender, sequence, version, count, scalar, arrays)

    @classmethod
    def from_message(cls, message: Message, layout: FrameStackSpec) -> FrameInsert:
        if message.kind != Kind.INSERT_FRAMES:
            raise ProtocolError(f"expected INSERT_FRAMES, got {message.kind.name}")
        if message.scalar not in (0.0, 1.0):
            raise ProtocolError(f"INSERT_FRAMES scalar must be 0 or 1, got {message.scalar}")
        compressed = message.scalar == 1.0
        head = 5 if compressed else 4
        fields = layout.record_spec
        if len(message.arrays) != head + len(fields) + 1:
            raise ProtocolError(
                f"INSERT_FRAMES has {len(message.arrays)} arrays, expected {head} for frames, "
                f"{len(fields)} record fields and priorities"
            )
        check_count(message)
        streams, numbers, starts = message.arrays[:3]
        count = numbers.shape[0] if numbers.ndim else -1
        for name, array in (("streams", streams), ("numbers", numbers), ("starts", starts)):
            dtype = np.bool_ if name == "starts" else np.int64
            if array.dtype != dtype or array.shape != (count,):
                raise ProtocolError(f"INSERT_FRAMES {name} are {array.dtype}{array.shape}")
        records = dict(zip(fields, message.arrays[head:-1], strict=True))
        payload = message.arrays[3:head]
        if compressed:
            return cls(
                streams,
                numbers,
                starts,
                records,
                message.arrays[-1],
                data=payload[0],
                offsets=payload[1],
            )
        return cls(streams, numbers, starts, records, message.arrays[-1], frames=payload[0])


def check_blobs(data: np.ndarray, offsets: np.ndarray, count: int, largest: int):
    """``data`` (u8) and ``offsets`` (``count + 1`` integers) that cut it into ``count``
    non-empty blobs of at most ``largest`` bytes, as contiguous u8 and int64 arrays.

    Raises:
        InvalidBatchError: anything else.
    """
    data = np.ascontiguousarray(data).reshape(-1)
    offsets = np.ascontiguousarray(offsets).reshape(-1)
    if data.dtype != np.uint8 or offsets.dtype.kind not in "iu" or offsets.size != count + 1:
        raise InvalidBatchError(
            f"compressed frames need u8 data and {count + 1} integer offsets, got "
            f"{data.dtype}{data.shape} and {offsets.dtype}{offsets.shape}"
        )
    offsets = offsets.astype(np.int64, copy=False)
    lengths = np.diff(offsets)
    if count and (
        offsets[0] != 0 or lengths.min() <= 0 or offsets[-1] != data.size or lengths.max() > largest
    ):
        raise InvalidBatchError("blob offsets do not cut the data into non-empty frames")
    return data, offsets


@dataclass(frozen=True)
class FramePayload:
    """The frames of a sampled batch.

    Attributes:
        index: int32 ``(n, heads × k)``: item ``b``'s stacks, in head order (a
            transition's ``obs`` then ``next_obs``, an unroll's one a step), each ``k``
            frames oldest first, as rows of the frames below.
        data: u8, the distinct frames one after another.
        offsets: int64 ``(u + 1,)``: frame ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
        compressed: the frames are LZ4 blocks (else whole frames).
    """

    index: np.ndarray
    data: np.ndarray
    offsets: np.ndarray
    compressed: bool


def unpack(
    payload: FramePayload, layout: FrameStackSpec, out: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """The stack fields of ``layout`` put together (a transition's ``obs`` and
    ``next_obs``, ``(n, k, *frame_shape)`` each; an unroll's ``obs``, ``(n, T + 1, k,
    *frame_shape)``), in new arrays or in ``out``'s (C-contiguous, ``n`` rows, the
    fields' dtype: checked by the caller).

    Raises:
        ProtocolError: indices, offsets or frames that do not fit ``layout``.
    """
    k, nbytes = layout.stack, layout.frame_nbytes
    index, data, offsets = payload.index, payload.data, payload.offsets
    columns = layout.head_count * k
    if index.ndim != 2 or index.shape[1] != columns or index.dtype != np.int32:
        raise ProtocolError(
            f"frame index is {index.dtype}{index.shape}, expected int32 (n, {columns})"
        )
    if data.dtype != np.uint8 or data.ndim != 1 or offsets.dtype != np.int64 or offsets.ndim != 1:
        raise ProtocolError("frames must be u8 data and int64 offsets")
    count = offsets.size - 1
    if count < 0 or (count and (offsets[0] != 0 or offsets[-1] != data.size)):
        raise ProtocolError("frame offsets do not cut the data")
    if (np.diff(offsets) <= 0).any():
        raise ProtocolError("frame offsets must rise: every frame has bytes")
    if index.size and (index.min() < 0 or index.max() >= count):
        raise ProtocolError(f"a frame index is outside [0, {count})")
    if not payload.compressed and (
        data.size != count * nbytes or (count and (np.diff(offsets) != nbytes).any())
    ):
        raise ProtocolError(f"whole frames must be {nbytes} bytes each")
    n, fields, column = len(index), {}, 0
    for name, per_item in layout.stack_fields:
        if out is None:
            fields[name] = np.empty((n, *layout.transition_spec[name].shape), layout.frame_dtype)
        else:
            fields[name] = out[name]
            if not fields[name].flags.c_contiguous:
                raise ValueError(f"rows for {name} must be C-contiguous")
        width = per_item * k
        columns = np.ascontiguousarray(index[:, column : column + width])
        _put_together(payload, columns, fields[name].reshape(n, width, nbytes).view(np.uint8))
        column += width
    return fields


def _put_together(payload: FramePayload, index: np.ndarray, out: np.ndarray) -> None:
    """``out[b, j]`` = frame ``index[b, j]`` of the payload, on a few threads."""
    nbytes = out.shape[2]
    if payload.compressed:
        from replay.frames.lz4_codec import kernels

        decode, bad = kernels().decode_stacks, []

        def decode_part(start: int, stop: int) -> None:
            first_bad = decode(payload.data, payload.offsets, index[start:stop], out[start:stop])
            if first_bad >= 0:
                bad.append(first_bad)

        run_in_parts(len(index), decode_part, default_threads())
        if bad:
            raise ProtocolError(f"frame {min(bad)} does not decode to {nbytes} bytes")
        return
    from replay.frames.kernels import stack_rows

    frames = payload.data.reshape(-1, nbytes)

    def stack_part(start: int, stop: int) -> None:
        stack_rows(frames, index[start:stop], out[start:stop])

    run_in_parts(len(index), stack_part, default_threads())
