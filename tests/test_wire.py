"""Wire format: round trips for every kind, and malformed input rejected with ProtocolError."""

from __future__ import annotations

import contextlib
import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import ProtocolError, ReplayError
from replay.protocol import messages
from replay.wire import layout as wire
from replay.wire import packed
from replay.wire import text as wire_text
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
        Message(Kind.INFO_REPLY, 0, 4, arrays=(wire_text.text_array('{"size": 3}'),)),
        Message(Kind.SPEC, 2, 0),
        Message(Kind.SPEC_REPLY, 0, 0, arrays=(messages.spec_reply(SMALL_SPEC, 0, 0).arrays[0],)),
        Message(Kind.ERROR, 0, 9, arrays=(wire_text.text_array("bad β"),)),
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
    assert wire_text.array_text(wire_text.text_array("αβ ok")) == "αβ ok"
    assert messages.read_spec(messages.spec_reply(SMALL_SPEC, 0, 0)) == SMALL_SPEC
    for text in ('[["obs", [4], "object"]]', "{not json"):
        bad = Message(Kind.SPEC_REPLY, arrays=(wire_text.text_array(text),))
        with pytest.raises(ProtocolError, match="malformed spec"):
            messages.read_spec(bad)
    with pytest.raises(ProtocolError, match="UTF-8"):
        wire_text.array_text(np.frombuffer(b"\xff\xfe", dtype=np.uint8))


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
        "magic": wire.MAGIC,
        "version": wire.PROTOCOL_VERSION,
        "kind": int(Kind.INFO),
        "sender": 1,
        "sequence": 0,
        "policy": -1,
        "count": 0,
        "arrays": 0,
        "reserved": 0,
        "scalar": 0.0,
        "incarnation": 0,
        "held": 0,
    }
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


@pytest.mark.slow
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


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(0, 300), min_size=1, max_size=6))
def test_the_insert_encoder_makes_exactly_what_encode_makes(counts: list[int]) -> None:
    encoder = messages.InsertEncoder(SMALL_SPEC)
    for sequence, count in enumerate(counts):
        batch, priorities = make_batch(SMALL_SPEC, count, sequence), np.linspace(0, 1, count)
        expected = encode(messages.Insert(batch, priorities).to_message(SMALL_SPEC, 5, sequence, 3))
        assert as_bytes(encoder.encode(batch, priorities, 5, sequence, 3)) == as_bytes(expected)
    # A batch too large to pack goes a frame per array, as encode sends it.
    big = 70_000 // 8
    batch, priorities = make_batch(SMALL_SPEC, big), np.ones(big)
    expected = encode(messages.Insert(batch, priorities).to_message(SMALL_SPEC, 5, 0, 3))
    assert len(expected) > 1
    assert as_bytes(encoder.encode(batch, priorities, 5, 0, 3)) == as_bytes(expected)


def test_the_insert_encoder_checks_batches_against_the_spec() -> None:
    encoder = messages.InsertEncoder(SMALL_SPEC)
    batch = make_batch(SMALL_SPEC, 4)
    batch["reward"] = batch["reward"].astype(np.float64)
    with pytest.raises(ReplayError, match="reward"):
        encoder.encode(batch, np.ones(4), 5, 0, 3)


def test_restamp_in_place_stamps_a_fresh_bytearray_only() -> None:
    frames = messages.InsertEncoder(SMALL_SPEC).encode(
        make_batch(SMALL_SPEC, 3), np.ones(3), 5, 0, 3
    )
    assert type(frames[0]) is bytearray
    stamped = wire.restamp(frames, sequence=9, incarnation=4, held=2, in_place=True)
    assert stamped is frames and decode(stamped).sequence == 9
    frozen = [bytes(frames[0])]
    copied = wire.restamp(frozen, sequence=11, incarnation=4, held=2, in_place=True)
    assert copied is not frozen and decode(frozen).sequence == 9 and decode(copied).sequence == 11


def test_packed_messages_of_one_layout_join_along_their_first_axis() -> None:
    batches = [make_batch(SMALL_SPEC, 6, seed) for seed in range(3)]

    def sent_as(batch: dict, priority: float, pack: bool = True) -> list[bytes]:
        insert = messages.Insert(batch, np.full(len(batch["action"]), priority))
        return as_bytes(encode(insert.to_message(SMALL_SPEC, 1, 0, 0), pack=pack))

    sent = [sent_as(b, float(i)) for i, b in enumerate(batches)]
    header = wire.read_header(sent[0][0])
    assert len({packed.packed_key(frames, wire.read_header(frames[0])) for frames in sent}) == 1
    joined = packed.join_packed(sent, header)
    for position, name in enumerate(SMALL_SPEC):
        assert np.array_equal(joined[position], np.concatenate([b[name] for b in batches]))
    assert np.array_equal(joined[-1], np.repeat([0.0, 1.0, 2.0], 6))
    # Another count is another layout; a framed message has none.
    other = sent_as(make_batch(SMALL_SPEC, 5), 1.0)
    assert packed.packed_key(other, wire.read_header(other[0])) != packed.packed_key(
        sent[0], header
    )
    framed = sent_as(batches[0], 1.0, pack=False)
    assert packed.packed_key(framed, wire.read_header(framed[0])) is None
    with pytest.raises(ProtocolError, match="one layout"):
        packed.join_packed([sent[0], [sent[1][0][:-8]]], header)
