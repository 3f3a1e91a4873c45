"""Packed messages (``replay.wire.layout``) in bulk, where a peer's cost per small message
is Python's rather than the bytes': a sender's encoder for messages of one fixed layout,
and a receiver's join of a run of messages of one layout into one array per field.
"""

from __future__ import annotations

import enum
import math
import struct
from collections.abc import Sequence

import numpy as np

from replay.errors import ProtocolError
from replay.wire.layout import (
    HEADER,
    HEADER_NBYTES,
    MAGIC,
    MAX_ARRAYS,
    PACK_MAX_BYTES,
    PADDING,
    PROTOCOL_VERSION,
    Header,
    describe_arrays,
    frame_buffer,
    packed_offsets,
)


class PackedEncoder:
    """Encodes messages of one kind whose arrays share a first axis, the message's
    ``count``, and keep their dtypes and trailing shapes: byte for byte what
    :func:`encode` makes of them, at a fraction of its cost. Those fix every descriptor
    but the count, so each count's descriptors are built once; a sender of small
    batches (an actor's inserts) pays for a header and one join a message.

    Args:
        kind: the messages' kind.
        arrays: ``(dtype, trailing shape)`` of each array, in order.

    Raises:
        ProtocolError: a dtype the wire does not carry, or too many arrays or dimensions.
    """

    def __init__(self, kind: enum.IntEnum, arrays: Sequence[tuple[np.dtype, tuple[int, ...]]]):
        if len(arrays) > MAX_ARRAYS:
            raise ProtocolError(f"{len(arrays)} arrays exceed the limit of {MAX_ARRAYS}")
        self._kind = int(kind)
        self._arrays = tuple((np.dtype(dtype), tuple(shape)) for dtype, shape in arrays)
        describe_arrays(tuple((dtype, (1, *shape)) for dtype, shape in self._arrays))  # checks them
        self._counts: dict[int, tuple[bytes, bytes, tuple[bytes, ...]] | None] = {}

    def encode(
        self,
        arrays: Sequence[np.ndarray],
        count: int,
        sender: int,
        sequence: int,
        policy_version: int,
    ) -> list | None:
        """One packed frame of ``arrays``, which the caller has checked: C-contiguous,
        of the dtypes and shapes given, ``count`` long; None if they are too large to
        pack (:func:`encode` then sends them a frame each).

        Raises:
            ProtocolError: a header value out of its field's range.
        """
        layout = self._counts.get(count, False)
        if layout is False:
            layout = self._layout(count)
        if layout is None:
            return None
        descriptors, padding, paddings = layout
        try:
            header = HEADER.pack(
                MAGIC,
                PROTOCOL_VERSION,
                self._kind,
                sender,
                sequence,
                policy_version,
                count,
                len(self._arrays),
                len(descriptors),
                0.0,
                0,
                0,
            )
        except struct.error as exc:
            raise ProtocolError(f"header value out of range: {exc}") from exc
        parts = [header, descriptors, padding]
        for array, pad in zip(arrays, paddings, strict=True):
            parts.append(array)
            parts.append(pad)
        return [bytearray().join(parts)]  # a bytearray: ``restamp`` may stamp it in place

    def _layout(self, count: int) -> tuple[bytes, bytes, tuple[bytes, ...]] | None:
        shapes = tuple((dtype, (count, *shape)) for dtype, shape in self._arrays)
        descriptors, payload = describe_arrays(shapes)
        layout = None
        if payload + 8 * len(shapes) <= PACK_MAX_BYTES:
            nbytes = [math.prod(shape) * dtype.itemsize for dtype, shape in shapes]
            paddings = tuple(PADDING[: -size % 8] for size in nbytes)
            layout = (descriptors, PADDING[: -len(descriptors) % 8], paddings)
        if len(self._counts) < 1024:  # counts an actor sends: a handful
            self._counts[count] = layout
        return layout


def packed_key(frames: Sequence[object], header: Header) -> tuple[bytes, int, int] | None:
    """What makes packed messages joinable (:func:`join_packed`): their descriptors,
    array count and frame length, equal for messages of one layout; None for a message
    not packed."""
    if not header.packed or len(frames) != 1:
        return None
    frame = frame_buffer(frames[0])
    descriptors = bytes(frame[HEADER_NBYTES : HEADER_NBYTES + header.packed])
    return descriptors, header.array_count, len(frame)


def join_packed(messages: Sequence[Sequence[object]], header: Header) -> tuple[np.ndarray, ...]:
    """The arrays of packed messages (each a list of frames) of one layout (one
    :func:`packed_key`; ``header`` is the first one's), each message's joined along the
    first axis: for a run of inserts, the fields and priorities of all their
    transitions. Two copies of the bytes in all, where decoding each message and joining
    its arrays costs a few array objects a message.

    Raises:
        ProtocolError: the layout is malformed or has an array of no first axis.
    """
    key = packed_key(messages[0], header)
    if key is None:
        raise ProtocolError("only packed messages can be joined")
    offsets, total = packed_offsets(key[0], header.array_count)
    if total != key[2]:
        raise ProtocolError(f"packed frame of {key[2]} bytes, its layout needs {total}")
    rows = len(messages)
    joined = b"".join([frame_buffer(frames[0]) for frames in messages])
    if len(joined) != rows * total:
        raise ProtocolError("the messages joined are not of one layout")
    blob = np.frombuffer(joined, dtype=np.uint8).reshape(rows, total)
    arrays = []
    for dtype, shape, offset in offsets:
        if not shape:
            raise ProtocolError("a scalar array cannot be joined along a first axis")
        nbytes = math.prod(shape) * dtype.itemsize
        column = np.ascontiguousarray(blob[:, offset : offset + nbytes])
        arrays.append(column.view(dtype).reshape(rows * shape[0], *shape[1:]))
    return tuple(arrays)
