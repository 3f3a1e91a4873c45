"""The wire format: every message is a list of ZeroMQ frames, a binary header then raw arrays.

Nothing is pickled and no generic object serializer is used: a receiver only ever builds
numpy arrays of whitelisted dtypes over the bytes it was sent, after checking their sizes.

Frame layout (all integers little-endian)::

    frame 0  header
        offset size  field
             0    2  magic            b"AX"
             2    1  version          PROTOCOL_VERSION (3)
             3    1  kind             Kind (INSERT, SAMPLE, ...)
             4    4  sender           u32 id of the sending process (actor index, ...)
             8    8  sequence         u64, per sender and socket, starting at 0
            16    8  policy_version   i64 weights version the data was made with (-1: none)
            24    4  count            u32 kind-specific count (transitions, batch size)
            28    2  array_count      u16 number of arrays
            30    2  packed           0: each array in a frame of its own; else the length
                                      of the descriptors, the arrays follow in frame 0
            32    8  scalar           f64 kind-specific number (β for SAMPLE)
            40    4  incarnation      u32 random id of the sending process's life (0: none)
            44    4  held             u32 inserts: how many of the sender's messages just
                                      before this one on its lane it still holds;
                                      CREDIT_REPLY: 1 while the limiter holds inserts
            48       one descriptor per array:
                  1  dtype code       index into DTYPES
                  1  ndim             0..MAX_NDIM
                  2  reserved         must be 0
              4·ndim shape            u32 per dimension
    frame 1…n  one C-contiguous array buffer each, exactly prod(shape)·itemsize bytes

A message whose arrays are small (``PACK_MAX_BYTES`` in all) is *packed*: frame 0 alone,
the arrays after the descriptors, each starting at a multiple of 8 bytes (zero padding),
the frame ending at the last one's padded end. One frame instead of one per array: a
small insert costs a ZeroMQ send and receive instead of seven, and its bytes are copied
once, as ZeroMQ would copy frames this small anyway.

Kinds 1-31 are replay's own (:class:`Kind`); each one's arrays are read and written by one
class in ``replay.protocol.messages``. Kinds 32-63 are reserved for the applications built on this
format (apex's weights and episodes, see ``apex.channels``): replay never sends them, and a
replay socket rejects them as unknown. ``decode`` takes the enum of kinds its socket may
carry, so each side checks against its own list.

``encode`` and ``decode`` are pure functions. ``decode`` checks the layout (magic, version,
kind, descriptor bounds, frame count, frame sizes) and raises :class:`ProtocolError`;
checking arrays against a spec is the receiver's job (``replay.protocol.messages``).

Version 2 moved the application kinds from 10-11 to 32-33 and renamed RECEIVED to CREDIT
(same numbers, 12 and 13). Version 3 added ``incarnation``, which lets a receiver tell a
restarted peer from its predecessor, and made an insert's ``sequence`` its number on the
sender's lane to that shard, with ``held`` (see ``replay.server.lanes``). Older versions are
refused.
"""

from __future__ import annotations

import enum
import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import zmq

from replay.errors import ProtocolError

MAGIC = b"AX"
PROTOCOL_VERSION = 3
MAX_NDIM = 8
# Frames are counted in the header as u16; a message never needs more than a handful.
MAX_ARRAYS = 64
DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(name).newbyteorder("<")
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
)
_DTYPE_CODE = {dtype: code for code, dtype in enumerate(DTYPES)}
# The layouts of frame 0 (see above): what a receiver reads, and a fuzz builds hostile ones by.
HEADER = struct.Struct("<2sBBIQqIHHdII")
DESCRIPTOR = struct.Struct("<BBH")
HEADER_NBYTES = HEADER.size
PACK_MAX_BYTES = 65536
# Where restamp writes: sequence at 8; incarnation and held at 40.
_SEQUENCE_OFFSET, _SEQUENCE = 8, struct.Struct("<Q")
_LIFE_OFFSET, _LIFE = 40, struct.Struct("<II")
_COUNT_OFFSET, _COUNT = 24, struct.Struct("<I")
PADDING = bytes(8)
# numpy refuses an array whose nonzero dimensions and item size multiply past its index
# type (even an empty one, (0, 2^32-1, ...)); a descriptor beyond it describes nothing.
MAX_ARRAY_NBYTES = np.iinfo(np.intp).max
# Kinds an application on top of replay may define for its own sockets (see above).
APPLICATION_KINDS = range(32, 64)


class Kind(enum.IntEnum):
    """Replay's message kinds; the arrays of each are laid out in ``replay.protocol.messages``."""

    INSERT = 1
    SAMPLE = 2
    SAMPLE_REPLY = 3
    UPDATE = 4
    INFO = 5
    INFO_REPLY = 6
    SPEC = 7
    SPEC_REPLY = 8
    ERROR = 9
    CREDIT = 12
    CREDIT_REPLY = 13
    INSERT_FRAMES = 14
    SNAPSHOT = 15
    STOP = 16


@dataclass(frozen=True)
class Message:
    """A decoded (or to-be-encoded) message.

    Attributes:
        kind: what the message is.
        sender: u32 id of the sending process.
        sequence: u64 message number, per sender and socket.
        policy_version: weights version the payload was made with, -1 if none.
        count: kind-specific count (transitions in an INSERT, batch size of a SAMPLE).
        scalar: kind-specific number (β of a SAMPLE).
        incarnation: u32 id of the sender's process life (0: it does not say).
        held: for inserts, the messages just before this one that the sender still holds
            (``replay.server.lanes``); for a CREDIT_REPLY, 1 while the shard's rate
            limiter refuses inserts; 0 otherwise.
        arrays: the payload; after ``decode`` these are read-only views of the frames.
    """

    kind: enum.IntEnum
    sender: int = 0
    sequence: int = 0
    policy_version: int = -1
    count: int = 0
    scalar: float = 0.0
    arrays: tuple[np.ndarray, ...] = ()
    incarnation: int = 0
    held: int = 0


def encode(
    message: Message, pack: bool = True, max_packed_bytes: int = PACK_MAX_BYTES
) -> list[bytes | memoryview | np.ndarray]:
    """Frames for ``message``: the header, then each array's buffer (not copied); or one
    packed frame when the arrays take at most ``max_packed_bytes`` and ``pack`` allows it
    (a copy: a sender that must never send a multipart message raises the limit).

    Raises:
        ProtocolError: an array that is not C-contiguous, has an unsupported dtype or more
            than ``MAX_NDIM`` dimensions, or a header value out of its field's range.
    """
    arrays = message.arrays
    if len(arrays) > MAX_ARRAYS:
        raise ProtocolError(f"{len(arrays)} arrays exceed the limit of {MAX_ARRAYS}")
    for position, array in enumerate(arrays):
        if not isinstance(array, np.ndarray):
            raise ProtocolError(f"array {position} is a {type(array).__name__}, not an ndarray")
        if not array.flags.c_contiguous:
            raise ProtocolError(f"array {position} is not C-contiguous")
    descriptor_bytes, payload = describe_arrays(tuple((a.dtype, a.shape) for a in arrays))
    packed = pack and bool(arrays) and payload + 8 * len(arrays) <= max_packed_bytes
    try:
        header = HEADER.pack(
            MAGIC,
            PROTOCOL_VERSION,
            int(message.kind),
            message.sender,
            message.sequence,
            message.policy_version,
            message.count,
            len(message.arrays),
            len(descriptor_bytes) if packed else 0,
            message.scalar,
            message.incarnation,
            message.held,
        )
    except struct.error as exc:
        raise ProtocolError(f"header value out of range: {exc}") from exc
    if packed:
        parts = [header, descriptor_bytes, PADDING[: -len(descriptor_bytes) % 8]]
        for array in arrays:
            parts.append(array)  # a C-contiguous array is a buffer: joined without a view
            parts.append(PADDING[: -array.nbytes % 8])
        return [b"".join(parts)]
    # An empty array travels as an empty frame (a zero-size buffer cannot be cast to bytes).
    return [header + descriptor_bytes, *(a if a.size else b"" for a in arrays)]


@functools.lru_cache(maxsize=1024)
def describe_arrays(layout: tuple[tuple[np.dtype, tuple[int, ...]], ...]) -> tuple[bytes, int]:
    """The descriptors of arrays of these ``(dtype, shape)``, and their bytes in all.
    Cached: a sender repeats the same layout for every batch. Errors are raised, never
    cached."""
    descriptors, payload = [], 0
    for position, (dtype, shape) in enumerate(layout):
        code = _DTYPE_CODE.get(dtype.newbyteorder("<"))
        if code is None or dtype.byteorder == ">":
            raise ProtocolError(f"array {position} has unsupported dtype {dtype}")
        if len(shape) > MAX_NDIM:
            raise ProtocolError(f"array {position} has {len(shape)} > {MAX_NDIM} dimensions")
        descriptors.append(DESCRIPTOR.pack(code, len(shape), 0))
        try:
            descriptors.append(struct.pack(f"<{len(shape)}I", *shape))
        except struct.error as exc:
            raise ProtocolError(f"array {position}: shape {shape} out of range: {exc}") from exc
        payload += math.prod(shape) * dtype.itemsize
    return b"".join(descriptors), payload


def restamp(
    frames: list, *, sequence: int, incarnation: int, held: int, in_place: bool = False
) -> list:
    """``frames`` of an encoded message with new ``sequence``, ``incarnation`` and
    ``held`` in the header: one copy of frame 0 (the header, or a whole packed message);
    the array frames are shared. ``in_place``: a frame 0 that is a bytearray is
    stamped as it is (frames the caller made and nothing else holds yet)."""
    first = frames[0]
    if in_place and type(first) is bytearray:
        _SEQUENCE.pack_into(first, _SEQUENCE_OFFSET, sequence)
        _LIFE.pack_into(first, _LIFE_OFFSET, incarnation, held)
        return frames
    header = bytearray(frame_buffer(first))
    try:
        _SEQUENCE.pack_into(header, _SEQUENCE_OFFSET, sequence)
        _LIFE.pack_into(header, _LIFE_OFFSET, incarnation, held)
    except struct.error as exc:
        raise ProtocolError(f"header value out of range: {exc}") from exc
    return [header, *frames[1:]]


def peek_count(frames: list) -> int:
    """The header's ``count`` of an encoded message (transitions, for an insert)."""
    return _COUNT.unpack_from(frame_buffer(frames[0]), _COUNT_OFFSET)[0]


def frame_buffer(frame: object) -> memoryview:
    # zmq.Frame exposes .buffer (bytes, 1-D); bytes, bytearray and memoryview are
    # buffers already.
    if type(frame) is zmq.Frame:
        return frame.buffer
    if isinstance(frame, np.ndarray):
        return memoryview(np.ascontiguousarray(frame).reshape(-1).view(np.uint8))
    return memoryview(getattr(frame, "buffer", frame)).cast("B")


class Header(NamedTuple):
    """Frame 0's fixed fields (the layout above), as :func:`read_header` checked them."""

    kind: enum.IntEnum
    sender: int
    sequence: int
    policy_version: int
    count: int
    array_count: int
    packed: int
    scalar: float
    incarnation: int
    held: int


def read_header(frame: object, kinds: type[enum.IntEnum] = Kind) -> Header:
    """The header of a message's frame 0, its magic, version, kind and array count
    checked; the arrays are not (:func:`decode` reads them).

    Raises:
        ProtocolError: short, bad magic, unknown version or kind, too many arrays.
    """
    header = frame_buffer(frame)
    if len(header) < HEADER_NBYTES:
        raise ProtocolError(f"header of {len(header)} bytes is shorter than {HEADER_NBYTES}")
    (
        magic,
        version,
        kind_code,
        sender,
        sequence,
        policy_version,
        count,
        array_count,
        packed,
        scalar,
        incarnation,
        held,
    ) = HEADER.unpack_from(header)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"unknown protocol version {version}, expected {PROTOCOL_VERSION}")
    kind = _kinds_by_code(kinds).get(kind_code)
    if kind is None:
        raise ProtocolError(f"unknown message kind {kind_code}")
    if array_count > MAX_ARRAYS:
        raise ProtocolError(f"{array_count} arrays exceed the limit of {MAX_ARRAYS}")
    return Header(
        kind,
        sender,
        sequence,
        policy_version,
        count,
        array_count,
        packed,
        scalar,
        incarnation,
        held,
    )


@functools.cache
def _kinds_by_code(kinds: type[enum.IntEnum]) -> dict[int, enum.IntEnum]:
    return {int(kind): kind for kind in kinds}


def decode(frames: Sequence[object], kinds: type[enum.IntEnum] = Kind) -> Message:
    """Parses frames made by :func:`encode` (bytes, memoryviews or ``zmq.Frame``).

    Args:
        frames: the message's frames.
        kinds: the kinds this socket may carry; any other kind is refused.

    Returns:
        The message; its arrays are read-only views of the frames' memory (no copy).

    Raises:
        ProtocolError: bad magic, unknown version or kind, truncated or inconsistent
            descriptors, a frame count or size that disagrees with the header.
    """
    if not frames:
        raise ProtocolError("empty message")
    header = read_header(frames[0], kinds)
    if header.packed:
        arrays = _packed_arrays(
            frame_buffer(frames[0]), header.array_count, header.packed, len(frames)
        )
    else:
        arrays = _framed_arrays(frame_buffer(frames[0]), header.array_count, frames)
    return Message(
        header.kind,
        header.sender,
        header.sequence,
        header.policy_version,
        header.count,
        header.scalar,
        arrays,
        header.incarnation,
        header.held,
    )


def _framed_arrays(header: memoryview, array_count: int, frames: Sequence[object]) -> tuple:
    if len(frames) != 1 + array_count:
        raise ProtocolError(f"header announces {array_count} arrays but {len(frames) - 1} came")
    layout = _layout(bytes(header[HEADER_NBYTES:]), array_count)
    arrays = []
    for position, (dtype, shape, nbytes) in enumerate(layout):
        frame = frames[1 + position]
        try:
            flat = np.frombuffer(frame, dtype=dtype)
        except (TypeError, ValueError) as exc:  # not a buffer, or not a whole number of items
            raise ProtocolError(
                f"array {position}: frame does not hold {dtype} items: {exc}"
            ) from None
        if flat.nbytes != nbytes:
            raise ProtocolError(
                f"array {position}: frame has {flat.nbytes} bytes, shape {shape} of "
                f"{dtype} needs {nbytes}"
            )
        arrays.append(flat.reshape(shape))
    return tuple(arrays)


def _packed_arrays(
    frame: memoryview, array_count: int, descriptor_nbytes: int, frame_count: int
) -> tuple:
    if frame_count != 1:
        raise ProtocolError(f"a packed message is one frame, {frame_count} came")
    end = HEADER_NBYTES + descriptor_nbytes
    if end > len(frame):
        raise ProtocolError(f"descriptors of {descriptor_nbytes} bytes overrun the frame")
    offsets, total = packed_offsets(bytes(frame[HEADER_NBYTES:end]), array_count)
    if total > len(frame):
        raise ProtocolError(f"packed arrays overrun the frame of {len(frame)} bytes")
    if total < len(frame):
        raise ProtocolError(f"packed frame has {len(frame) - total} bytes past its arrays")
    return tuple(np.ndarray(shape, dtype, frame, offset) for dtype, shape, offset in offsets)


@functools.lru_cache(maxsize=256)
def packed_offsets(
    descriptors: bytes, array_count: int
) -> tuple[tuple[tuple[np.dtype, tuple[int, ...], int], ...], int]:
    """``(dtype, shape, offset)`` per array of a packed frame, and the frame's length."""
    offset = HEADER_NBYTES + len(descriptors)
    offset += -offset % 8
    offsets = []
    for dtype, shape, nbytes in _layout(descriptors, array_count):
        offsets.append((dtype, shape, offset))
        offset += nbytes + (-nbytes % 8)
    return tuple(offsets), offset


@functools.lru_cache(maxsize=256)
def _layout(
    descriptors: bytes, array_count: int
) -> tuple[tuple[np.dtype, tuple[int, ...], int], ...]:
    """``(dtype, shape, nbytes)`` per array. Cached: a sender repeats the same layout for
    every batch, and parsing it is most of the work of decoding a small message. Errors
    are raised, never cached."""
    offset = 0
    layout = []
    for position in range(array_count):
        if offset + DESCRIPTOR.size > len(descriptors):
            raise ProtocolError(f"descriptor {position} is truncated")
        code, ndim, pad = DESCRIPTOR.unpack_from(descriptors, offset)
        offset += DESCRIPTOR.size
        if code >= len(DTYPES) or ndim > MAX_NDIM or pad != 0:
            raise ProtocolError(
                f"descriptor {position}: dtype code {code}, ndim {ndim}, reserved {pad}"
            )
        if offset + 4 * ndim > len(descriptors):
            raise ProtocolError(f"descriptor {position}: shape is truncated")
        shape = struct.unpack_from(f"<{ndim}I", descriptors, offset)
        offset += 4 * ndim
        dtype = DTYPES[code]
        extent = math.prod(dim for dim in shape if dim) * dtype.itemsize
        if extent > MAX_ARRAY_NBYTES:
            raise ProtocolError(
                f"descriptor {position}: shape {shape} of {dtype} spans {extent} bytes, "
                f"past the {MAX_ARRAY_NBYTES} an array can address"
            )
        layout.append((dtype, shape, math.prod(shape) * dtype.itemsize))
    if offset != len(descriptors):
        raise ProtocolError(f"header has {len(descriptors) - offset} trailing bytes")
    return tuple(layout)
