"""Wire format: round trips for every kind, and malformed input rejected with ProtocolError."""

from __future__ import annotations

import contextlib
import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import ProtocolError
from replay.protocol import messages
from replay.wire import layout as wire
from replay.wire.layout import Kind, Message, decode, encode
from tests.conftest import SMALL_SPEC, make_batch


def as_bytes(frames: list) -> list[bytes]:
    """What a receiver gets: every frame as its own bytes object."""
    return [
        bytes(memoryview(frame).cast("B")) if not isinstance(frame, bytes) else frame
        for frame in frames
    ]


def round_trip(message: Message, pack: bool = True) -> Message:
    return decode(as_bytes(encode(message, pack=pack)))


def assert_same(decoded: Message, original: Message) -> None:
    assert decoded.kind == original.kind
    assert decoded.sender == original.sender
    assert decoded.sequence == original.sequence
    assert decoded.policy_version == original.policy_version
    assert decoded.count == original.count
    assert decoded.scalar == original.scalar
    assert decoded.incarnation == original.incarnation
    assert decoded.held == original.held
    assert len(decoded.arrays) == len(original.arrays)
    for got, sent in zip(decoded.arrays, original.arrays, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)


def every_kind() -> list[Message]:
    batch = make_batch(SMALL_SPEC, 50)
    rng = np.random.default_rng(0)
    slots = rng.integers(0, 1 << 20, 512)
    return [
        Message(Kind.INSERT, 7, 12, 3, 50, 0.0, (*batch.values(), rng.random(50)), 2**32 - 1),
        Message(Kind.SAMPLE, 1, 2**64 - 1, -1, 512, 0.4),
        Message(
            Kind.SAMPLE_REPLY,
            0,
            5,
            9,
            512,
            0.0,
            (np.array([10.0, 0.1, 100, 1024]), slots, slots, rng.random(512), *batch.values()),
        ),
        Message(Kind.UPDATE, 1, 3, -1, 512, 0.0, (slots, slots, rng.random(512))),
        Message(Kind.INFO, 1, 4),
        Message(Kind.INFO_REPLY, 0, 4, arrays=(wire.text_array('{"size": 3}'),)),
        Message(Kind.SPEC, 2, 0),
        Message(Kind.SPEC_REPLY, 0, 0, arrays=(messages.spec_reply(SMALL_SPEC, 0, 0).arrays[0],)),
        Message(Kind.ERROR, 0, 9, arrays=(wire.text_array("bad β"),)),
        Message(Kind.INSERT, 1, 0, 0, 1, 0.0, (np.zeros((1, 4, 84, 84), np.uint8), np.ones(1))),
        Message(Kind.INSERT, 1, 0, 0, 0, 0.0, (np.zeros((0, 4), np.float32), np.ones(0))),
        Message(Kind.INSERT, 1, 0, 0, 2, 0.0, (np.array([True, False]), np.float16([1, 2]))),
    ]


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "framed"])
@pytest.mark.parametrize("message", every_kind(), ids=lambda m: m.kind.name)
def test_every_kind_round_trips(message: Message, pack: bool) -> None:
    frames = encode(message, pack=pack)
    assert len(frames) == (1 if pack and message.arrays else 1 + len(message.arrays))
    assert_same(round_trip(message, pack), message)


def test_small_messages_are_packed_and_large_ones_framed() -> None:
    big = Message(Kind.INSERT, arrays=(np.zeros(wire.PACK_MAX_BYTES, np.uint8), np.ones(3)))
    assert len(encode(big)) == 3
    packed = encode(every_kind()[0])[0]
    assert len(packed) % 8 == 0
    # Arrays start at multiples of 8 bytes, and a frame with bytes past them is refused.
    base = np.frombuffer(packed, np.uint8).ctypes.data
    assert all((a.ctypes.data - base) % 8 == 0 for a in decode([packed]).arrays if a.size)
    with pytest.raises(ProtocolError, match="past its arrays"):
        decode([packed + bytes(8)])
    with pytest.raises(ProtocolError, match="overrun"):
        decode([packed[:-16]])
    with pytest.raises(ProtocolError, match="one frame"):
        decode([packed, b""])


def test_restamp_changes_only_the_stamped_fields() -> None:
    message = every_kind()[0]
    frames = encode(message)
    again = decode(as_bytes(wire.restamp(frames, sequence=9, incarnation=5, held=3)))
    assert_same(again, dataclasses.replace(message, sequence=9, incarnation=5, held=3))
    assert_same(decode(as_bytes(frames)), message)


def test_decoded_arrays_are_read_only_views_of_the_frames() -> None:
    frames = as_bytes(encode(every_kind()[0]))
    decoded = decode(frames)
    assert not decoded.arrays[0].flags.writeable
    assert decoded.arrays[0].base is not None


def test_text_and_spec_payloads_round_trip() -> None:
    assert wire.array_text(wire.text_array("αβ ok")) == "αβ ok"
    assert messages.read_spec(messages.spec_reply(SMALL_SPEC, 0, 0)) == SMALL_SPEC
    for text in ('[["obs", [4], "object"]]', "{not json"):
        bad = Message(Kind.SPEC_REPLY, arrays=(wire.text_array(text),))
        with pytest.raises(ProtocolError, match="malformed spec"):
            messages.read_spec(bad)
    with pytest.raises(ProtocolError, match="UTF-8"):
        wire.array_text(np.frombuffer(b"\xff\xfe", dtype=np.uint8))


def test_encode_refuses_what_cannot_travel() -> None:
    with pytest.raises(ProtocolError, match="C-contiguous"):
        encode(Message(Kind.INSERT, arrays=(np.zeros((4, 4))[:, ::2],)))
    with pytest.raises(ProtocolError, match="unsupported dtype"):
        encode(Message(Kind.INSERT, arrays=(np.zeros(3, dtype=np.complex64),)))
    with pytest.raises(ProtocolError, match="unsupported dtype"):
        encode(Message(Kind.INSERT, arrays=(np.zeros(3, dtype=">f4"),)))
    with pytest.raises(ProtocolError, match="not an ndarray"):
        encode(Message(Kind.INSERT, arrays=([1, 2],)))
    with pytest.raises(ProtocolError, match="out of range"):
        encode(Message(Kind.INSERT, sender=-1))


def header_with(**changes: int) -> bytes:
    fields = {
        "magic": wire.MAGIC, "version": wire.PROTOCOL_VERSION, "kind": int(Kind.INFO),
        "sender": 1, "sequence": 0, "policy": -1, "count": 0, "arrays": 0, "reserved": 0,
        "scalar": 0.0, "incarnation": 0, "held": 0,
    }  # fmt: skip
    fields.update(changes)
    return struct.pack("<2sBBIQqIHHdII", *fields.values())


@pytest.mark.parametrize(
    ("frames", "pattern"),
    [
        ([], "empty message"),
        ([b"AX\x01"], "shorter than"),
        ([header_with(magic=b"ZZ")], "bad magic"),
        ([header_with(version=1)], "unknown protocol version 1"),
        ([header_with(version=2)], "unknown protocol version 2"),
        ([header_with(version=4)], "unknown protocol version 4"),
        ([header_with(kind=99)], "unknown message kind 99"),
        ([header_with(kind=10)], "unknown message kind 10"),
        ([header_with(kind=32)], "unknown message kind 32"),
        ([header_with(reserved=1)], "overrun the frame"),
        ([header_with(arrays=1), b""], "descriptor 0 is truncated"),
        ([header_with(arrays=1) + bytes([0, 1, 0, 0]) + struct.pack("<I", 4)], "announces 1"),
        ([header_with(arrays=1) + bytes([0, 1, 0, 0]) + struct.pack("<I", 4), b"abc"], "3 bytes"),
        (
            [header_with(arrays=1) + bytes([200, 1, 0, 0]) + struct.pack("<I", 4), b"abcd"],
            "code 200",
        ),
        ([header_with(arrays=1) + bytes([5, 9, 0, 0]), b""], "ndim 9"),
        ([header_with(arrays=1) + bytes([5, 2, 0, 0]) + b"\x01\x00", b""], "shape is truncated"),
        ([header_with() + b"junk"], "trailing bytes"),
        ([header_with(arrays=200)], "exceed the limit"),
        ([header_with(), b"extra"], "announces 0"),
    ],
)
def test_malformed_frames_raise_protocol_errors(frames: list[bytes], pattern: str) -> None:
    with pytest.raises(ProtocolError, match=pattern):
        decode(frames)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.binary(max_size=120), min_size=0, max_size=5))
def test_random_bytes_never_raise_anything_but_protocol_errors(frames: list[bytes]) -> None:
    with contextlib.suppress(ProtocolError):
        decode(frames)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_mutated_valid_messages_decode_or_raise_protocol_errors(data: st.DataObject) -> None:
    message = data.draw(st.sampled_from(every_kind()))
    frames = as_bytes(encode(message))
    position = data.draw(st.integers(0, len(frames) - 1))
    frame = bytearray(frames[position])
    if frame:
        index = data.draw(st.integers(0, len(frame) - 1))
        frame[index] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        frame = frame[: data.draw(st.integers(0, len(frame)))]
    frames[position] = bytes(frame)
    with contextlib.suppress(ProtocolError):
        decode(frames)
