"""Property tests at the descriptor level: every message a peer can make, decoded and read
by every receiver, raises nothing but ``ProtocolError`` (or, past the layout, the store's
``ReplayError``), and a refused insert stores nothing.

The messages come from ``bench.faults.fuzz_descriptors`` driven by hypothesis (so a failure
shrinks to a small message); the benchmark's endpoint fuzz drives the same generator with
a seeded numpy generator against live processes.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apex.channels import ApexKind, read_episodes
from apex.weights import read_weights
from bench.faults.fuzz_descriptors import descriptor_message
from replay.errors import ProtocolError, ReplayError
from replay.frames.payload import FrameInsert, FramePayload
from replay.frames.spec import FrameStackSpec
from replay.protocol import messages
from replay.protocol.sample_reply import SampleReply
from replay.server.config import ShardConfig
from replay.server.ingest import Ingest
from replay.store.spec import TransitionSpec
from replay.wire.layout import Kind, Message, decode
from replay.wire.text import text_array
from tests.conftest import SMALL_SPEC, make_batch

SCALARS = TransitionSpec.from_dict(
    {"action": ((), "int64"), "reward": ((), "float32"), "discount": ((), "float32")}
)
FRAMES = FrameStackSpec((6, 6), "uint8", 2, SCALARS)
WEIGHT_SHAPES = {"torso.0.weight": (8, 4), "torso.0.bias": (8,)}
EXAMPLES = 600


class HypothesisDraws:
    """``bench.faults.fuzz_descriptors.Draws`` from hypothesis, so failures shrink."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, low: int, high: int) -> int:
        return self.data.draw(st.integers(low, high))

    def pick(self, options):
        return self.data.draw(st.sampled_from(options))

    def chance(self, probability: float) -> bool:
        return self.data.draw(st.integers(0, 999)) < probability * 1000

    def payload(self, nbytes: int) -> bytes:
        # Large payloads from a drawn seed: hypothesis's own buffer would overrun.
        seed, small = self.data.draw(st.integers(0, 2**32 - 1)), self.data.draw(st.booleans())
        rng = np.random.default_rng(seed)
        if small:
            return rng.integers(0, 3, nbytes, dtype=np.uint8).tobytes()
        return rng.bytes(nbytes)


def _frame_insert(compressed: bool) -> Message:
    numbers = np.arange(3, dtype=np.int64)
    records = {
        "stream": np.full(2, 5, np.int64),
        "obs_frame": np.array([0, 1], np.int64),
        "next_obs_frame": np.array([1, 2], np.int64),
        "action": np.array([0, 1], np.int64),
        "reward": np.ones(2, np.float32),
        "discount": np.full(2, 0.99, np.float32),
    }
    head = (np.full(3, 5, np.int64), numbers, numbers == 0)
    if compressed:
        import lz4.block

        blobs = [lz4.block.compress(bytes(36 * [n]), store_size=False) for n in range(3)]
        offsets = np.cumsum([0, *map(len, blobs)])
        insert = FrameInsert(
            *head,
            records,
            np.ones(2),
            offsets=offsets,
            data=np.frombuffer(b"".join(blobs), np.uint8),
        )
    else:
        insert = FrameInsert(*head, records, np.ones(2), frames=np.ones((3, 6, 6), np.uint8))
    return insert.to_message(FRAMES, 3, 0, 1)


def templates() -> list[Message]:
    """A valid message of every kind any receiver reads."""
    batch = make_batch(SMALL_SPEC, 4)
    slots = np.arange(4, dtype=np.int64)
    stats = np.array([4.0, 1.0, 4, 16])
    reply = SampleReply(4.0, 1.0, 4, 16, slots, slots, np.ones(4), np.ones(4, np.float32), batch)
    frame_scalars = {n: batch_field for n, batch_field in make_batch(SCALARS, 4).items()}
    payload = FramePayload(
        np.zeros((4, 4), np.int32), np.ones(36, np.uint8), np.array([0, 36]), compressed=False
    )
    frame_reply = SampleReply(
        4.0, 1.0, 4, 16, slots, slots, np.ones(4), np.ones(4, np.float32), frame_scalars, payload
    )
    weights = [
        text_array('["torso.0.weight", "torso.0.bias"]'),
        np.ones((8, 4), np.float32),
        np.ones(8, np.float32),
    ]
    episodes = (np.ones(2), np.array([10, 20]), np.zeros(6, np.int64))
    return [
        messages.Insert(batch, np.ones(4)).to_message(SMALL_SPEC, 1, 0, 0),
        _frame_insert(compressed=True),
        _frame_insert(compressed=False),
        messages.SampleRequest(4, 0.4).to_message(1, 0),
        reply.to_message(0, 0),
        frame_reply.to_message(0, 0),
        messages.PriorityUpdate(slots, slots, np.ones(4)).to_message(1, 0),
        messages.CreditRequest(3, 100).to_message(1, 0),
        messages.CreditReply(3, 9, False, 4).to_message(0, 0),
        messages.info_reply({"size": 4, "stats": stats.tolist()}, 0, 0),
        messages.spec_reply(SMALL_SPEC, 0, 0, {"stack": 2, "compressed": True}),
        messages.error("refused", 0, 0),
        Message(ApexKind.WEIGHTS, 0, 0, 3, 0, 0.0, tuple(weights)),
        Message(ApexKind.EPISODES, 2, 0, 3, 2, 100.0, episodes, incarnation=7),
    ]


TEMPLATES = templates()
KINDS = [int(kind) for kind in (*Kind, *ApexKind)]


def _readers(message: Message) -> list:
    """Every parser a receiver applies to a decoded message."""
    spec, frame_spec = SMALL_SPEC, FRAMES.transition_spec
    return [
        lambda: messages.Insert.from_message(message, spec),
        lambda: FrameInsert.from_message(message, FRAMES),
        lambda: messages.SampleRequest.from_message(message),
        lambda: SampleReply.from_message(message, spec),
        lambda: SampleReply.from_message(message, frame_spec),
        lambda: messages.PriorityUpdate.from_message(message),
        lambda: messages.CreditRequest.from_message(message),
        lambda: messages.CreditReply.from_message(message),
        lambda: messages.read_info(message),
        lambda: messages.read_spec(message),
        lambda: messages.read_frame_layout(message),
        lambda: messages.read_error(message),
        lambda: read_weights(message, WEIGHT_SHAPES),
        lambda: read_episodes(message),
    ]


def _decoded(frames: list[bytes]) -> list[Message]:
    decoded = []
    for kinds in (Kind, ApexKind):
        with contextlib.suppress(ProtocolError):
            decoded.append(decode(frames, kinds))
    return decoded


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_decode_and_every_reader_raise_only_protocol_errors(data: st.DataObject) -> None:
    frames = descriptor_message(HypothesisDraws(data), KINDS, TEMPLATES)
    for message in _decoded(frames):
        for read in _readers(message):
            with contextlib.suppress(ProtocolError):
                read()


def test_a_frame_reply_with_a_rank_zero_frame_index_is_a_protocol_error() -> None:
    """Found by the test above: a frame SAMPLE_REPLY whose frame-stack index (its ninth
    array) has no dimension raised TypeError (the length of a 0-d array)."""
    [template] = [m for m in TEMPLATES if m.kind == Kind.SAMPLE_REPLY and len(m.arrays) == 11]
    arrays = list(template.arrays)
    arrays[8] = np.asarray(arrays[8].flat[0])
    message = dataclasses.replace(template, arrays=tuple(arrays))
    with pytest.raises(ProtocolError, match="frame stacks of shape"):
        SampleReply.from_message(message, FRAMES.transition_spec)


@pytest.fixture(scope="module")
def stores() -> dict[str, Ingest]:
    return {
        "whole": Ingest(ShardConfig(spec=SMALL_SPEC, capacity=64)),
        "frames": Ingest(ShardConfig(spec=FRAMES.transition_spec, capacity=64, frames=FRAMES)),
        "lz4": Ingest(
            ShardConfig(
                spec=FRAMES.transition_spec, capacity=64, frames=FRAMES, compress_frames=True
            )
        ),
    }


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_store_refuses_with_replay_errors_and_keeps_what_it_had(
    stores: dict[str, Ingest], data: st.DataObject
) -> None:
    frames = descriptor_message(HypothesisDraws(data), KINDS, TEMPLATES)
    for message in _decoded(frames):
        for ingest in stores.values():
            replay = ingest.replay
            before = (replay.size, replay.total_priority)
            try:
                added = ingest.take(message)
            except ReplayError:
                assert (replay.size, replay.total_priority) == before
                continue
            assert added == message.count
        if message.kind == Kind.UPDATE:
            for ingest in stores.values():
                with contextlib.suppress(ReplayError):
                    update = messages.PriorityUpdate.from_message(message)
                    ingest.replay.update_priorities(
                        update.indices, update.generations, update.priorities
                    )


@pytest.mark.parametrize(
    "dims",
    [(0, 2**32 - 1, 2**32 - 1, 2**32 - 1), (2**32 - 1,) * 7 + (0,), (0, 2**31, 2**31, 4)],
)
@pytest.mark.parametrize("pack", [True, False], ids=["packed", "framed"])
def test_an_empty_array_of_impossible_extent_is_refused(dims: tuple, pack: bool) -> None:
    """The message that ended a live shard: a well-formed descriptor whose nonzero
    dimensions multiply past what numpy can address, with no bytes (0 in the shape)."""
    import struct

    from replay.wire.layout import HEADER_NBYTES, encode

    frames = [
        bytes(memoryview(f).cast("B")) if not isinstance(f, bytes) else f
        for f in encode(Message(Kind.INSERT, arrays=(np.zeros((0,) * len(dims)),)), pack=pack)
    ]
    header = bytearray(frames[0])
    struct.pack_into(f"<{len(dims)}I", header, HEADER_NBYTES + 4, *dims)
    with pytest.raises(ProtocolError, match="can address"):
        decode([bytes(header), *frames[1:]])


@pytest.mark.parametrize(
    ("dtype", "value", "loads"),
    [
        ("float16", 65504.0, True),
        ("float16", np.inf, False),
        ("float32", np.nan, False),
        ("float64", 1e300, False),
        ("float64", -3e38, True),
    ],
)
def test_weights_a_float32_policy_cannot_hold_are_refused(dtype: str, value: float, loads: bool):
    names = text_array('["torso.0.weight", "torso.0.bias"]')
    weight = np.full((8, 4), value, dtype=dtype)
    message = Message(ApexKind.WEIGHTS, arrays=(names, weight, np.zeros(8, dtype)))
    if loads:
        assert read_weights(message, WEIGHT_SHAPES)["torso.0.weight"] is weight
    else:
        with pytest.raises(ProtocolError, match="NaN, infinite or beyond-float32"):
            read_weights(message, WEIGHT_SHAPES)
