"""Replay's typed messages: each kind's builder and reader agree, and a reader refuses a
message whose arrays do not fit its kind, with a ProtocolError."""

from __future__ import annotations

import enum

import numpy as np
import pytest

from replay.errors import ProtocolError
from replay.protocol import messages
from replay.protocol.sample_reply import SampleReply
from replay.wire.layout import APPLICATION_KINDS, Kind, Message, decode, encode
from replay.wire.text import text_array
from tests.conftest import SMALL_SPEC, make_batch


def through_the_wire(message: Message, kinds: type[enum.IntEnum] = Kind) -> Message:
    frames = [
        bytes(memoryview(f).cast("B")) if not isinstance(f, bytes) else f for f in encode(message)
    ]
    return decode(frames, kinds)


def sample_reply(count: int = 6) -> SampleReply:
    rng = np.random.default_rng(3)
    return SampleReply(
        total_priority=12.5,
        min_priority=0.25,
        size=40,
        capacity=64,
        indices=rng.integers(0, 64, count),
        generations=rng.integers(0, 9, count),
        priorities=rng.random(count),
        weights=rng.random(count).astype(np.float32),
        fields=make_batch(SMALL_SPEC, count),
    )


def test_insert_round_trips_in_spec_order() -> None:
    batch = make_batch(SMALL_SPEC, 5)
    shuffled = dict(reversed(list(batch.items())))
    message = messages.Insert(shuffled, np.arange(5.0)).to_message(SMALL_SPEC, 3, 7, 11)
    assert (message.count, message.policy_version, message.sequence) == (5, 11, 7)
    insert = messages.Insert.from_message(through_the_wire(message), SMALL_SPEC)
    assert list(insert.fields) == list(SMALL_SPEC)
    for name in SMALL_SPEC:
        np.testing.assert_array_equal(insert.fields[name], batch[name])
    np.testing.assert_array_equal(insert.priorities, np.arange(5.0))


def test_an_insert_with_missing_fields_is_refused() -> None:
    message = Message(Kind.INSERT, arrays=(np.zeros((2, 4), np.float32), np.ones(2)))
    with pytest.raises(ProtocolError, match="expected 5 fields"):
        messages.Insert.from_message(message, SMALL_SPEC)


def test_sample_reply_round_trips() -> None:
    sent = sample_reply()
    got = SampleReply.from_message(through_the_wire(sent.to_message(2, 9)), SMALL_SPEC)
    assert (got.total_priority, got.min_priority, got.size, got.capacity) == (12.5, 0.25, 40, 64)
    for name in ("indices", "generations", "priorities", "weights"):
        np.testing.assert_array_equal(getattr(got, name), getattr(sent, name))
    for name in SMALL_SPEC:
        np.testing.assert_array_equal(got.fields[name], sent.fields[name])


@pytest.mark.parametrize(
    ("position", "array", "pattern"),
    [
        (0, np.zeros(3), "stats"),
        (1, np.zeros(6, np.int32), "indices"),
        (4, np.zeros(5, np.float32), "weights"),
        (5, np.zeros((5, 4), np.float32), "field obs has 5 rows"),
    ],
)
def test_a_sample_reply_that_does_not_fit_is_refused(
    position: int, array: np.ndarray, pattern: str
) -> None:
    arrays = list(sample_reply().to_message(0, 0).arrays)
    arrays[position] = array
    with pytest.raises(ProtocolError, match=pattern):
        SampleReply.from_message(Message(Kind.SAMPLE_REPLY, arrays=tuple(arrays)), SMALL_SPEC)
    short = Message(Kind.SAMPLE_REPLY, arrays=tuple(arrays[:4]))
    with pytest.raises(ProtocolError, match="arrays, expected"):
        SampleReply.from_message(short, SMALL_SPEC)


@pytest.mark.parametrize(
    ("count", "beta"), [(0, 0.4), (8, -1.0), (8, float("nan")), (8, float("inf"))]
)
def test_a_sample_request_needs_a_batch_and_a_finite_beta(count: int, beta: float) -> None:
    message = Message(Kind.SAMPLE, count=count, scalar=beta)
    with pytest.raises(ProtocolError, match="count > 0 and finite beta"):
        messages.SampleRequest.from_message(message)
    assert messages.SampleRequest.from_message(
        messages.SampleRequest(8, 0.4).to_message(0, 0)
    ) == messages.SampleRequest(8, 0.4)


def test_priority_update_round_trips_and_needs_int64_slots() -> None:
    update = messages.PriorityUpdate(np.arange(4), np.ones(4, np.int32), np.full(4, 0.5))
    got = messages.PriorityUpdate.from_message(through_the_wire(update.to_message(1, 2)))
    assert got.generations.dtype == np.int64 and got.indices.tolist() == [0, 1, 2, 3]
    bad = Message(Kind.UPDATE, arrays=(np.arange(4, dtype=np.int32), np.arange(4), np.ones(4)))
    with pytest.raises(ProtocolError, match="int64 indices"):
        messages.PriorityUpdate.from_message(bad)


def test_credit_request_caps_its_wait_and_refuses_non_counts() -> None:
    request = messages.CreditRequest(12.0, 10**9)
    got = messages.CreditRequest.from_message(through_the_wire(request.to_message(4, 0)))
    assert got == messages.CreditRequest(12.0, messages.MAX_CREDIT_WAIT_MS)
    final = messages.CreditRequest(12.0, 10**9, final=True)
    got = messages.CreditRequest.from_message(through_the_wire(final.to_message(4, 0)))
    assert got == messages.CreditRequest(12.0, messages.MAX_CREDIT_WAIT_MS, final=True)
    quick = messages.CreditRequest(3.0, 250, final=True)
    assert messages.CreditRequest.from_message(through_the_wire(quick.to_message(4, 0))) == quick
    for wanted in (float("nan"), -1.0, 2.0**60):
        with pytest.raises(ProtocolError, match="CREDIT needs a count"):
            messages.CreditRequest.from_message(Message(Kind.CREDIT, scalar=wanted))
    reply = messages.CreditReply(7.0).to_message(0, 3)
    assert messages.CreditReply.from_message(through_the_wire(reply)).taken == 7.0
    every = messages.CreditReply(7.0, 9, True, 300, limiter_holds=True)
    assert messages.CreditReply.from_message(through_the_wire(every.to_message(0, 3))) == every


def test_text_replies_round_trip_and_refuse_the_wrong_kind() -> None:
    info = {"size": 3, "min_priority": None}
    assert messages.read_info(through_the_wire(messages.info_reply(info, 0, 1))) == info
    assert messages.read_error(through_the_wire(messages.error("bad β", 0, 1))) == "bad β"
    with pytest.raises(ProtocolError, match="expected INFO_REPLY, got ERROR"):
        messages.read_info(messages.error("x", 0, 0))
    with pytest.raises(ProtocolError, match="not a JSON object"):
        messages.read_info(Message(Kind.INFO_REPLY, arrays=(text_array("[1]"),)))


class AppKind(enum.IntEnum):
    FIRST = APPLICATION_KINDS.start


def test_application_kinds_decode_only_where_the_socket_expects_them() -> None:
    message = Message(AppKind.FIRST, 1, 2, arrays=(np.ones(3),))
    assert through_the_wire(message, AppKind).kind is AppKind.FIRST
    with pytest.raises(ProtocolError, match=f"unknown message kind {APPLICATION_KINDS.start}"):
        through_the_wire(message)
    assert not set(Kind) & set(APPLICATION_KINDS)
