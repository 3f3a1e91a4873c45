"""A shard's grouped ingest (``Ingest.take_group``): a round's messages of whole transitions
stored in one write, each still checked and refused alone."""

from __future__ import annotations

import struct

import numpy as np

from replay.errors import InvalidBatchError, InvalidPriorityError, ProtocolError
from replay.protocol import messages
from replay.server.config import ShardConfig
from replay.server.ingest import Ingest
from replay.wire.layout import encode, read_header
from tests.conftest import SMALL_SPEC, make_batch

ARRAY_COUNT_OFFSET = 28


def insert(first_id: int, count: int = 4, priorities=None, pack: bool = True, **changes) -> list:
    batch = make_batch(SMALL_SPEC, count, first_id)
    batch.update(changes)
    priority = np.ones(count) if priorities is None else priorities
    message = messages.Insert(batch, priority).to_message(SMALL_SPEC, 1, 0, 0)
    return [bytes(memoryview(frame).cast("B")) for frame in encode(message, pack=pack)]


def take(ingest: Ingest, messages_: list[list]) -> list:
    return ingest.take_group([(read_header(frames[0]), frames) for frames in messages_])


def stored_ids(ingest: Ingest) -> list[int]:
    return sorted(int(i) for i in ingest.replay.storage.column("action")[: ingest.replay.size])


def count_writes(ingest: Ingest) -> list[int]:
    """Appends each ring write's transitions to the list returned."""
    storage, writes = ingest.replay.storage, []
    write = storage.write

    def counted(batch, count):
        writes.append(count)
        return write(batch, count)

    storage.write = counted
    return writes


def test_a_round_of_good_messages_is_stored_whole_and_in_one_write() -> None:
    ingest = Ingest(ShardConfig(spec=SMALL_SPEC, capacity=1000))
    writes = count_writes(ingest)
    first = take(ingest, [insert(0), insert(100, count=3)])  # each layout's first: alone
    round_ = take(ingest, [insert(4 * i) for i in range(1, 6)] + [insert(103, count=3)])
    assert first == [4, 3] and round_ == [4, 4, 4, 4, 4, 3]
    assert writes == [4, 3, 20, 3]  # one write per layout
    assert stored_ids(ingest) == [*range(24), *range(100, 106)]


def test_each_bad_message_of_a_round_is_refused_alone_and_nothing_else() -> None:
    ingest = Ingest(ShardConfig(spec=SMALL_SPEC, capacity=1000))
    take(ingest, [insert(0)])
    count_lie = bytearray(insert(40)[0])
    struct.pack_into("<I", count_lie, 24, 5)
    arrays_lie = bytearray(insert(44)[0])
    struct.pack_into("<H", arrays_lie, ARRAY_COUNT_OFFSET, 5)
    hostile = [
        insert(20, priorities=np.array([1.0, np.nan, 1.0, 1.0])),  # joined, then refused
        insert(24, reward=np.zeros(4, np.float64)),  # another dtype: another layout
        insert(28, priorities=np.ones(4, np.float32)),  # priorities cast: stored alone
        [bytes(count_lie)],
        [bytes(arrays_lie)],
        insert(48, pack=False),  # framed: decoded alone
    ]
    good = [insert(4), insert(8), insert(12)]
    outcomes = take(ingest, [good[0], *hostile[:3], good[1], *hostile[3:], good[2]])
    kinds = [type(o) if not isinstance(o, int) else o for o in outcomes]
    assert kinds == [
        4,
        InvalidPriorityError,
        InvalidBatchError,
        4,
        4,
        ProtocolError,
        ProtocolError,
        4,
        4,
    ]
    assert stored_ids(ingest) == [*range(16), *range(28, 32), *range(48, 52)]
    # The layout stays good: the next round joins again.
    assert take(ingest, [insert(60), insert(64)]) == [4, 4]
