"""The wire format: every message is a list of ZeroMQ frames, a binary header then raw arrays.

Nothing is pickled and no generic object serializer is used: a receiver only ever builds
numpy arrays of whitelisted dtypes over the bytes it was sent, after checking their sizes.

Frame layout (all integers little-endian)::

    frame 0  header
        offset size  field
             0    2  magic            b"AX"
             2    1  version          PROTOCOL_VERSION (1)
             3    1  kind             Kind (INSERT, SAMPLE, ...)
             4    4  sender           u32 id of the sending process (actor index, ...)
             8    8  sequence         u64, per sender and socket, starting at 0
            16    8  policy_version   i64 weights version the data was made with (-1: none)
            24    4  count            u32 kind-specific count (transitions, batch size)
            28    2  array_count      u16 number of array frames that follow
            30    2  reserved         must be 0
            32    8  scalar           f64 kind-specific number (β for SAMPLE)
            40       one descriptor per array:
                  1  dtype code       index into DTYPES
                  1  ndim             0..MAX_NDIM
                  2  reserved         must be 0
              4·ndim shape            u32 per dimension
    frame 1…n  one C-contiguous array buffer each, exactly prod(shape)·itemsize bytes

Per kind, the arrays are (``F`` = the shard spec's fields, in spec order):

    INSERT        F…, priorities f64[count]                       actor → shard (PUSH)
    SAMPLE        none; count = batch size, scalar = β             learner → shard
    SAMPLE_REPLY  stats f64[4], indices i64, generations i64,
                  priorities f64 (stored p^α), weights f32, F…     shard → learner
                  stats = (total priority, min positive, size, capacity);
                  weights = (q_min / q_i)^β with this shard's q_min
    UPDATE        indices i64, generations i64, priorities f64     learner → shard
    INFO / SPEC   none                                             learner → shard
    INFO_REPLY    utf-8 JSON object as u8[n] (counters only)       shard → learner
    SPEC_REPLY    utf-8 JSON spec as u8[n]                         shard → client
    ERROR         utf-8 text as u8[n]                              shard → requester
    WEIGHTS       names (utf-8 JSON list) as u8[n], one array per   learner → actors (PUB)
                  parameter; policy_version = the weights' version
    EPISODES      returns f64[count], lengths i64[count]            actor → learner (PUSH)
    RECEIVED      none; scalar = insert messages the asker waits   actor → shard
                  for, count = longest wait in ms
    RECEIVED_REPLY none; scalar = insert messages taken from the    shard → actor
                  asker so far (sent once scalar ≥ the asked count,
                  or when the wait runs out)

``encode`` and ``decode`` are pure functions. ``decode`` checks the layout (magic, version,
kind, descriptor bounds, frame count, frame sizes) and raises :class:`ProtocolError`;
checking arrays against a spec is the receiver's job (:func:`check_insert`, ...).
"""

from __future__ import annotations

import enum
import functools
import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay.errors import ProtocolError
from replay.spec import TransitionSpec

MAGIC = b"AX"
PROTOCOL_VERSION = 1
MAX_NDIM = 8
# Frames are counted in the header as u16; a message never needs more than a handful.
MAX_ARRAYS = 64
DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(name).newbyteorder("<")
    for name in (
        "bool", "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64",
    )
)  # fmt: skip
_DTYPE_CODE = {dtype: code for code, dtype in enumerate(DTYPES)}
_HEADER = struct.Struct("<2sBBIQqIHHd")
_DESCRIPTOR = struct.Struct("<BBH")
HEADER_NBYTES = _HEADER.size
SAMPLE_STATS_NBYTES = 4


class Kind(enum.IntEnum):
    INSERT = 1
    SAMPLE = 2
    SAMPLE_REPLY = 3
    UPDATE = 4
    INFO = 5
    INFO_REPLY = 6
    SPEC = 7
    SPEC_REPLY = 8
    ERROR = 9
    WEIGHTS = 10
    EPISODES = 11
    RECEIVED = 12
    RECEIVED_REPLY = 13


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
        arrays: the payload; after ``decode`` these are read-only views of the frames.
    """

    kind: Kind
    sender: int = 0
    sequence: int = 0
    policy_version: int = -1
    count: int = 0
    scalar: float = 0.0
    arrays: tuple[np.ndarray, ...] = ()


def encode(message: Message) -> list[bytes | memoryview | np.ndarray]:
    """Frames for ``message``: the header, then each array's buffer (not copied).

    Raises:
        ProtocolError: an array that is not C-contiguous, has an unsupported dtype or more
            than ``MAX_NDIM`` dimensions, or a header value out of its field's range.
    """
    if len(message.arrays) > MAX_ARRAYS:
        raise ProtocolError(f"{len(message.arrays)} arrays exceed the limit of {MAX_ARRAYS}")
    descriptors = []
    for position, array in enumerate(message.arrays):
        if not isinstance(array, np.ndarray):
            raise ProtocolError(f"array {position} is a {type(array).__name__}, not an ndarray")
        if not array.flags.c_contiguous:
            raise ProtocolError(f"array {position} is not C-contiguous")
        code = _DTYPE_CODE.get(array.dtype.newbyteorder("<"))
        if code is None or array.dtype.byteorder == ">":
            raise ProtocolError(f"array {position} has unsupported dtype {array.dtype}")
        if array.ndim > MAX_NDIM:
            raise ProtocolError(f"array {position} has {array.ndim} > {MAX_NDIM} dimensions")
        descriptors.append(_DESCRIPTOR.pack(code, array.ndim, 0))
        descriptors.append(struct.pack(f"<{array.ndim}I", *array.shape))
    try:
        header = _HEADER.pack(
            MAGIC,
            PROTOCOL_VERSION,
            int(message.kind),
            message.sender,
            message.sequence,
            message.policy_version,
            message.count,
            len(message.arrays),
            0,
            message.scalar,
        )
    except struct.error as exc:
        raise ProtocolError(f"header value out of range: {exc}") from exc
    # An empty array travels as an empty frame (a zero-size buffer cannot be cast to bytes).
    return [header + b"".join(descriptors), *(a if a.size else b"" for a in message.arrays)]


def _buffer(frame: object) -> memoryview:
    # zmq.Frame exposes .buffer; bytes, bytearray and memoryview are buffers already.
    if isinstance(frame, np.ndarray):
        return memoryview(np.ascontiguousarray(frame).reshape(-1).view(np.uint8))
    return memoryview(getattr(frame, "buffer", frame)).cast("B")


def decode(frames: Sequence[object]) -> Message:
    """Parses frames made by :func:`encode` (bytes, memoryviews or ``zmq.Frame``).

    Returns:
        The message; its arrays are read-only views of the frames' memory (no copy).

    Raises:
        ProtocolError: bad magic, unknown version or kind, truncated or inconsistent
            descriptors, a frame count or size that disagrees with the header.
    """
    if not frames:
        raise ProtocolError("empty message")
    header = _buffer(frames[0])
    if len(header) < HEADER_NBYTES:
        raise ProtocolError(f"header of {len(header)} bytes is shorter than {HEADER_NBYTES}")
    (magic, version, kind_code, sender, sequence, policy_version, count, array_count,
     reserved, scalar) = _HEADER.unpack_from(header)  # fmt: skip
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"unknown protocol version {version}, expected {PROTOCOL_VERSION}")
    try:
        kind = Kind(kind_code)
    except ValueError:
        raise ProtocolError(f"unknown message kind {kind_code}") from None
    if reserved != 0:
        raise ProtocolError(f"reserved header field is {reserved}, expected 0")
    if array_count > MAX_ARRAYS:
        raise ProtocolError(f"{array_count} arrays exceed the limit of {MAX_ARRAYS}")
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
    return Message(kind, sender, sequence, policy_version, count, scalar, tuple(arrays))


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
        if offset + _DESCRIPTOR.size > len(descriptors):
            raise ProtocolError(f"descriptor {position} is truncated")
        code, ndim, pad = _DESCRIPTOR.unpack_from(descriptors, offset)
        offset += _DESCRIPTOR.size
        if code >= len(DTYPES) or ndim > MAX_NDIM or pad != 0:
            raise ProtocolError(
                f"descriptor {position}: dtype code {code}, ndim {ndim}, reserved {pad}"
            )
        if offset + 4 * ndim > len(descriptors):
            raise ProtocolError(f"descriptor {position}: shape is truncated")
        shape = struct.unpack_from(f"<{ndim}I", descriptors, offset)
        offset += 4 * ndim
        dtype = DTYPES[code]
        layout.append((dtype, shape, math.prod(shape) * dtype.itemsize))
    if offset != len(descriptors):
        raise ProtocolError(f"header has {len(descriptors) - offset} trailing bytes")
    return tuple(layout)


def text_array(text: str) -> np.ndarray:
    """UTF-8 text (or JSON) as a u8 array, for INFO_REPLY, SPEC_REPLY and ERROR."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def array_text(array: np.ndarray) -> str:
    """The inverse of :func:`text_array`.

    Raises:
        ProtocolError: not a 1-D u8 array of valid UTF-8.
    """
    if array.dtype != np.uint8 or array.ndim != 1:
        raise ProtocolError(f"text payload must be 1-D uint8, got {array.dtype} {array.shape}")
    try:
        return array.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"text payload is not UTF-8: {exc}") from exc


def spec_to_array(spec: TransitionSpec) -> np.ndarray:
    return text_array(
        json.dumps([[name, list(shape), dtype] for name, (shape, dtype) in spec.to_dict().items()])
    )


def spec_from_array(array: np.ndarray) -> TransitionSpec:
    """Parses a SPEC_REPLY payload.

    Raises:
        ProtocolError: not JSON of ``[[name, [dims], dtype], ...]`` naming a valid spec.
    """
    try:
        entries = json.loads(array_text(array))
        if not isinstance(entries, list):
            raise TypeError("not a list")
        return TransitionSpec.from_dict({str(n): (tuple(s), str(d)) for n, s, d in entries})
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"malformed spec payload: {exc}") from exc
