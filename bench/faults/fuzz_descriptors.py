"""Hostile messages made at the descriptor level: headers and array descriptors at their
limits, with payloads that fit what the descriptors claim often enough to get past
``replay.wire.layout.decode`` and reach the parsers and stores behind it.

``bench.faults.fuzz_messages`` mutates whole messages of known fate (each must be refused); this
module explores the space ``decode`` has to defend: every dtype code (valid and not),
ndim 0 to past ``MAX_NDIM``, dimensions 0, 1, small, and near 2^31 and 2^32, array counts
that disagree with the descriptors or the frames, packed and framed layouts, and header
fields (count, scalar, sequence) at their extremes. Messages made from a valid template
keep its layout and change one thing, so a receiver's own checks (spec, counts, values)
are exercised too, not only the frame layout.

One generator serves two drivers (:class:`Draws`): ``numpy.random.Generator`` for the
benchmark (``RngDraws``: fast, replayable from a seed) and hypothesis for the property
tests (their ``data.draw``: shrinks to a minimal failing message).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from replay.wire.layout import (
    DESCRIPTOR,
    DTYPES,
    HEADER,
    HEADER_NBYTES,
    MAGIC,
    MAX_ARRAYS,
    MAX_NDIM,
    PROTOCOL_VERSION,
    Message,
)

# Dimensions at the edges: empty, one, small, a frame's, and past i32 and u32 limits.
EDGE_DIMS = (0, 1, 2, 3, 4, 7, 84, 1 << 16, (1 << 31) - 1, 1 << 31, (1 << 32) - 2, (1 << 32) - 1)
EDGE_SCALARS = (0.0, -0.0, 1.0, 2.0, 0.5, -1.0, math.nan, math.inf, -math.inf, 2.0**53, 1e308)
EDGE_COUNTS = (0, 1, 2, 4, 50, 512, (1 << 31) - 1, (1 << 32) - 1)
# Payloads past this are sent short or long, never whole: a fuzz sends many messages.
MAX_PAYLOAD_BYTES = 1 << 16
INVALID_DTYPE_CODES = (len(DTYPES), len(DTYPES) + 1, 127, 255)


class Draws(Protocol):
    """The choices a generator makes; one implementation per driver."""

    def integer(self, low: int, high: int) -> int:
        """A uniform integer in ``[low, high]`` (both included)."""

    def pick(self, options: Sequence):
        """One of ``options``."""

    def chance(self, probability: float) -> bool:
        """True with about ``probability``."""

    def payload(self, nbytes: int) -> bytes:
        """``nbytes`` bytes of content."""


class RngDraws:
    """:class:`Draws` from a ``numpy.random.Generator``."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high, endpoint=True))

    def pick(self, options: Sequence):
        return options[int(self.rng.integers(len(options)))]

    def chance(self, probability: float) -> bool:
        return bool(self.rng.random() < probability)

    def payload(self, nbytes: int) -> bytes:
        if self.chance(0.5):  # small values: valid indices, counts, lengths
            return self.rng.integers(0, 3, nbytes, dtype=np.uint8).tobytes()
        return self.rng.bytes(nbytes)


def _dims(draws: Draws, ndim: int) -> list[int]:
    return [
        draws.pick(EDGE_DIMS) if draws.chance(0.5) else draws.integer(0, 64) for _ in range(ndim)
    ]


def _descriptor(draws: Draws) -> tuple[int, int, list[int], int]:
    """A random descriptor: (dtype code, ndim as written, dims, reserved); ndim past
    ``MAX_NDIM`` is written with only ``MAX_NDIM`` dims after it."""
    code = draws.integer(0, len(DTYPES) - 1)
    if draws.chance(0.05):
        code = draws.pick(INVALID_DTYPE_CODES)
    ndim = draws.integer(0, MAX_NDIM)
    if draws.chance(0.03):
        ndim = draws.pick((MAX_NDIM + 1, 255))
    reserved = draws.pick((1, 255 << 8)) if draws.chance(0.03) else 0
    return code, ndim, _dims(draws, min(ndim, MAX_NDIM)), reserved


def _template_descriptors(draws: Draws, template: Message) -> list[tuple[int, int, list[int], int]]:
    """The template's descriptors, with one array's dtype, ndim or a dimension changed."""
    codes = {dtype: code for code, dtype in enumerate(DTYPES)}
    descriptors = [
        (codes[a.dtype.newbyteorder("<")], a.ndim, list(a.shape), 0) for a in template.arrays
    ]
    if not descriptors:
        return descriptors
    position = draws.integer(0, len(descriptors) - 1)
    code, _, dims, reserved = descriptors[position]
    change = draws.pick(("dim", "dim", "dtype", "ndim", "none", "none"))
    if change == "dim" and dims:
        dims[draws.integer(0, len(dims) - 1)] = draws.pick(EDGE_DIMS)
    elif change == "dtype":
        code = draws.integer(0, len(DTYPES) - 1)
    elif change == "ndim":
        dims = _dims(draws, draws.integer(0, MAX_NDIM))
    descriptors[position] = (code, len(dims), dims, reserved)
    return descriptors


def _payload(draws: Draws, code: int, dims: list[int]) -> bytes:
    """Bytes for one array: exactly what its descriptor claims when that is small, often
    one item short or long, else a few random bytes."""
    itemsize = DTYPES[code].itemsize if code < len(DTYPES) else 1
    nbytes = math.prod(dims) * itemsize
    if nbytes > MAX_PAYLOAD_BYTES:
        return draws.payload(draws.integer(0, 64))
    if draws.chance(0.1):
        nbytes = max(0, nbytes + draws.pick((-itemsize, itemsize, -1, 1)))
    return draws.payload(nbytes)


def descriptor_message(
    draws: Draws, kinds: Sequence[int], templates: Sequence[Message] = ()
) -> list[bytes]:
    """The frames of one message made at the descriptor level.

    Args:
        draws: where the choices come from.
        kinds: kind codes to favour (a receiver's own; others are drawn too).
        templates: valid messages to start from (their layout, one thing changed); none:
            descriptors drawn from scratch.

    Returns:
        The frames, as a receiver gets them: bytes each.
    """
    template = draws.pick(templates) if templates and draws.chance(0.7) else None
    if template is not None:
        descriptors = _template_descriptors(draws, template)
        kind = int(template.kind) if draws.chance(0.9) else draws.integer(0, 255)
        count = template.count if draws.chance(0.85) else draws.pick(EDGE_COUNTS)
        scalar = template.scalar if draws.chance(0.85) else draws.pick(EDGE_SCALARS)
    else:
        descriptors = [_descriptor(draws) for _ in range(draws.integer(0, 8))]
        kind = draws.pick(kinds) if draws.chance(0.8) else draws.integer(0, 255)
        count = draws.pick(EDGE_COUNTS)
        scalar = draws.pick(EDGE_SCALARS)
    payloads = [_payload(draws, code, dims) for code, _, dims, _ in descriptors]
    if template is not None:  # an unchanged array keeps its content, mostly
        for position, (array, (_, _, dims, _)) in enumerate(
            zip(template.arrays, descriptors, strict=True)
        ):
            if list(array.shape) == dims and draws.chance(0.9):
                payloads[position] = array.tobytes()
    declared = len(descriptors)
    if draws.chance(0.05):
        declared = draws.pick((max(0, declared - 1), declared + 1, MAX_ARRAYS, MAX_ARRAYS + 1))
    descriptor_bytes = b"".join(
        DESCRIPTOR.pack(code, ndim, reserved) + struct.pack(f"<{len(dims)}I", *dims)
        for code, ndim, dims, reserved in descriptors
    )
    packed = bool(descriptors) and draws.chance(0.5)
    packed_field = len(descriptor_bytes) if packed else 0
    if packed and draws.chance(0.05):
        packed_field = draws.pick((1, max(1, packed_field - 4), packed_field + 4, 65535))
    header = HEADER.pack(
        MAGIC,
        PROTOCOL_VERSION if draws.chance(0.97) else draws.integer(0, 255),
        kind,
        draws.pick((0, 1, 7, (1 << 32) - 1)),
        draws.pick((0, 1, (1 << 64) - 1)),
        draws.pick((-1, 0, 1, (1 << 63) - 1, -(1 << 63))),
        count,
        declared,
        packed_field,
        scalar,
        draws.pick((0, 1, (1 << 32) - 1)),
        draws.pick((0, 1, (1 << 32) - 1)),
    )
    if not packed:
        frames = [header + descriptor_bytes, *payloads]
        if draws.chance(0.03):
            frames = frames[:-1] if len(frames) > 1 else [*frames, b""]
        return frames
    parts = [header, descriptor_bytes, bytes(-(HEADER_NBYTES + len(descriptor_bytes)) % 8)]
    for payload in payloads:
        parts += [payload, bytes(-len(payload) % 8)]
    frame = b"".join(parts)
    if draws.chance(0.05):
        frame = frame[: draws.integer(0, len(frame))]
    return [frame]
