"""Frame-deduplicating storage against a naive reference: random writer streams interleaved
on one store, episodes ending early, n-step references, ring wraparound of transitions and
of frames; and every way a reference can be wrong, refused with the store unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay import PrioritizedReplay, TransitionSpec
from replay.errors import InvalidBatchError, ProtocolError
from replay.frames.spec import FrameStackSpec
from replay.frames.storage import FrameStackStorage

FRAME = (3, 2)
SCALARS = TransitionSpec.from_dict(
    {"action": ((), "int64"), "reward": ((), "float32"), "discount": ((), "float32")}
)


def frame_of(stream: int, number: int) -> np.ndarray:
    """A frame whose bytes say which frame it is."""
    values = np.array([stream % 251, number % 251, (number // 251) % 251, 7, 11, 13])
    return values.astype(np.uint8).reshape(FRAME)


@dataclass
class Stream:
    """One env copy's frames and transitions, as an actor makes them (the reference)."""

    ident: int
    n: int
    episode_lengths: list[int]
    frames: list[tuple[int, bool]] = field(default_factory=list)  # (number, episode start)
    expected: list[dict] = field(default_factory=list)  # per record, in order

    def build(self, stack: int) -> None:
        number = 0
        for length in self.episode_lengths:
            first = number
            episode = list(range(first, first + length + 1))  # reset frame + one per step
            for index, frame_number in enumerate(episode):
                self.frames.append((frame_number, index == 0))
            for t in range(length):
                next_index = min(t + self.n, length)
                self.expected.append(
                    {
                        "obs_frame": episode[t],
                        "next_obs_frame": episode[next_index],
                        "obs": _stack(episode, t, stack),
                        "next_obs": _stack(episode, next_index, stack),
                        "ready_after": episode[next_index],  # sent once that frame is out
                    }
                )
            number += length + 1


def _stack(episode: list[int], index: int, stack: int) -> list[int]:
    """FrameStackObservation with reset padding: the episode's first frame repeated."""
    return [episode[max(index - stack + 1 + j, 0)] for j in range(stack)]


def feed(
    store: FrameStackStorage,
    streams: list[Stream],
    rng: np.random.Generator,
    replay: PrioritizedReplay | None = None,
) -> list[tuple[int, dict]]:
    """Sends every stream's frames and records in random interleaved chunks; returns the
    ``(stream, expected record)`` of each transition in write order."""
    frame_at = {s.ident: 0 for s in streams}
    record_at = {s.ident: 0 for s in streams}
    written: list[tuple[int, dict]] = []
    action = 0
    while any(record_at[s.ident] < len(s.expected) for s in streams):
        stream = streams[rng.integers(len(streams))]
        chunk = stream.frames[frame_at[stream.ident] : frame_at[stream.ident] + rng.integers(1, 5)]
        if chunk:
            numbers = np.array([n for n, _ in chunk])
            (replay or store).add_frames(
                np.full(len(chunk), stream.ident),
                numbers,
                np.array([s for _, s in chunk]),
                np.stack([frame_of(stream.ident, n) for n in numbers]),
            )
            frame_at[stream.ident] += len(chunk)
        sent_up_to = stream.frames[frame_at[stream.ident] - 1][0] if frame_at[stream.ident] else -1
        ready = []
        while (
            record_at[stream.ident] < len(stream.expected)
            and stream.expected[record_at[stream.ident]]["ready_after"] <= sent_up_to
        ):
            ready.append(stream.expected[record_at[stream.ident]])
            record_at[stream.ident] += 1
        if not ready:
            continue
        count = len(ready)
        records = {
            "stream": np.full(count, stream.ident, dtype=np.int64),
            "obs_frame": np.array([r["obs_frame"] for r in ready], dtype=np.int64),
            "next_obs_frame": np.array([r["next_obs_frame"] for r in ready], dtype=np.int64),
            "action": np.arange(action, action + count, dtype=np.int64),
            "reward": np.full(count, 0.5, np.float32),
            "discount": np.full(count, 0.9, np.float32),
        }
        for offset, record in enumerate(ready):
            written.append((stream.ident, {**record, "action": action + offset}))
        action += count
        if replay is None:
            store.write(records, count)
        else:
            replay.add(records, rng.uniform(0.1, 2.0, count))
    return written


def check_live(store: FrameStackStorage, written: list[tuple[int, dict]]) -> int:
    """Every live transition gathers exactly the reference's stacks; returns how many."""
    generations = store.generations
    live = np.flatnonzero(generations >= 0)
    gathered = store.gather(live)
    for position, slot in enumerate(live):
        ident, expected = written[generations[slot]]
        assert gathered["action"][position] == expected["action"]
        for name in ("obs", "next_obs"):
            want = np.stack([frame_of(ident, n) for n in expected[name]])
            np.testing.assert_array_equal(gathered[name][position], want, err_msg=name)
    return live.size


def built_streams(first: int, count: int, episodes: list[int], n: int = 3, stack: int = 4):
    """``count`` writer streams (ids from ``first``) of the given episode lengths, n-step."""
    streams = [Stream(first + i, n, episodes) for i in range(count)]
    for stream in streams:
        stream.build(stack)
    return streams


def make_spec(stack: int) -> FrameStackSpec:
    return FrameStackSpec(FRAME, "uint8", stack, SCALARS)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    stack=st.integers(1, 4),
    n=st.integers(1, 4),
    capacity=st.integers(3, 60),
    lengths=st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=6), min_size=1, max_size=5),
    seed=st.integers(0, 2**31),
    compress=st.booleans(),
)
def test_gathered_stacks_match_the_reference(stack, n, capacity, lengths, seed, compress) -> None:
    rng = np.random.default_rng(seed)
    streams = [Stream(1000 + i * 7919, n, episodes) for i, episodes in enumerate(lengths)]
    for stream in streams:
        stream.build(stack)
    store = FrameStackStorage(make_spec(stack), capacity, compress=compress)
    written = feed(store, streams, rng)
    live = check_live(store, written)
    # The default frame ring outlasts the transitions: none is evicted before its turn.
    assert store.evicted_early == 0
    assert live == min(len(written), capacity) == store.size
    assert store._refs.sum() == 2 * stack * live
    # The running count of arena bytes is the sum over the frames held.
    assert store.frame_bytes_stored == store._lengths[store._frame_gen >= 0].sum()


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    stack=st.integers(2, 4),
    frame_capacity=st.integers(12, 40),
    lengths=st.lists(st.lists(st.integers(1, 12), min_size=2, max_size=6), min_size=2, max_size=4),
    seed=st.integers(0, 2**31),
    arena_frames=st.one_of(st.none(), st.integers(3, 30)),
)
def test_a_small_frame_ring_evicts_transitions_first_and_never_serves_a_wrong_frame(
    stack, frame_capacity, lengths, seed, arena_frames
) -> None:
    rng = np.random.default_rng(seed)
    streams = [Stream(i, 3, episodes) for i, episodes in enumerate(lengths)]
    for stream in streams:
        stream.build(stack)
    # A short arena (compressed frames of about 10 bytes) drops frames before their slots do.
    arena = None if arena_frames is None else 30 + 10 * arena_frames
    store = FrameStackStorage(
        make_spec(stack), 64, frame_capacity=frame_capacity, compress=True, arena_bytes=arena
    )
    replay = PrioritizedReplay(None, 64, 0.6, rng=0, storage=store)
    try:
        written = feed(store, streams, rng, replay)
    except InvalidBatchError as exc:
        # A record whose frames the tiny ring already overwrote is refused, never served.
        assert "overwritten" in str(exc) or "does not hold" in str(exc)
        written = None
    if written is not None:
        check_live(store, written)
    # Evicted transitions carry no priority: sampling can never reach them.
    dead = np.flatnonzero(store.generations < 0)
    assert (replay.tree.leaves[dead] == 0).all()
    assert store._refs.min() >= 0


def put(store, stream: int, numbers, starts, frames=None) -> np.ndarray:
    """Adds frames ``numbers`` of ``stream``, each ``frame_of`` itself unless given."""
    numbers = np.asarray(numbers)
    if frames is None:
        frames = np.stack([frame_of(stream, k) for k in numbers])
    starts = np.broadcast_to(np.asarray(starts, dtype=bool), numbers.shape)
    return store.add_frames(np.full(numbers.size, stream), numbers, starts, frames)


def stack_of(stream: int, numbers) -> np.ndarray:
    return np.stack([frame_of(stream, k) for k in numbers])


def small_store() -> FrameStackStorage:
    store = FrameStackStorage(make_spec(4), 16, window=8, max_streams=2)
    numbers = np.arange(6)
    store.add_frames(
        np.full(6, 5), numbers, numbers == 0, np.stack([frame_of(5, k) for k in numbers])
    )
    return store


def records(obs: list[int], nxt: list[int], stream: int = 5) -> dict[str, np.ndarray]:
    count = len(obs)
    return {
        "stream": np.full(count, stream, dtype=np.int64),
        "obs_frame": np.array(obs, dtype=np.int64),
        "next_obs_frame": np.array(nxt, dtype=np.int64),
        "action": np.zeros(count, dtype=np.int64),
        "reward": np.zeros(count, np.float32),
        "discount": np.ones(count, np.float32),
    }


@pytest.mark.parametrize(
    ("obs", "nxt", "stream", "pattern"),
    [
        ([0, 1], [3, 9], 5, "record 1 .* does not hold"),  # never sent
        ([0], [2], 6, "does not hold"),  # unknown stream
        ([-1], [2], 5, "does not hold"),
    ],
)
def test_bad_references_are_refused_and_change_nothing(obs, nxt, stream, pattern) -> None:
    store = small_store()
    before = (store.items_written, store._refs.copy())
    with pytest.raises(InvalidBatchError, match=pattern):
        store.write(records(obs, nxt, stream), len(obs))
    assert store.items_written == before[0] and (store._refs == before[1]).all()


def test_a_stream_seen_from_the_middle_has_no_history_until_a_stack_fills() -> None:
    store = FrameStackStorage(make_spec(4), 16)
    numbers = np.arange(40, 46)  # a stretch of a stream: its episode began on another shard
    store.add_frames(
        np.full(6, 9), numbers, np.zeros(6, bool), np.stack([frame_of(9, k) for k in numbers])
    )
    with pytest.raises(InvalidBatchError, match="before the first frame"):
        store.write(records([42], [44], 9), 1)
    store.write(records([43], [45], 9), 1)  # 40..43 and 42..45: whole stacks
    got = store.gather(np.array([0]))
    np.testing.assert_array_equal(
        got["obs"][0], np.stack([frame_of(9, k) for k in (40, 41, 42, 43)])
    )


def test_frames_outside_the_window_and_resent_frames() -> None:
    store = small_store()
    late = np.arange(6, 14)
    store.add_frames(
        np.full(8, 5), late, np.zeros(8, bool), np.stack([frame_of(5, k) for k in late])
    )
    with pytest.raises(InvalidBatchError, match="does not hold"):
        store.write(records([3], [6]), 1)  # number 3 fell out of the window of 8
    # A resent frame is not stored again, and cannot change what is stored.
    store.add_frames(
        np.array([5]), np.array([12]), np.array([False]), np.zeros((1, *FRAME), np.uint8)
    )
    store.write(records([12], [13]), 1)
    got = store.gather(np.array([0]))
    np.testing.assert_array_equal(got["obs"][0][-1], frame_of(5, 12))


def test_malformed_frames_and_too_many_streams_are_refused() -> None:
    store = small_store()
    with pytest.raises(InvalidBatchError, match="expected uint8"):
        store.add_frames(
            np.array([5]), np.array([6]), np.array([False]), np.zeros((1, 2, 3), np.uint8)
        )
    with pytest.raises(InvalidBatchError, match="negative"):
        store.add_frames(
            np.array([5]), np.array([-6]), np.array([False]), np.zeros((1, *FRAME), np.uint8)
        )
    store.add_frames(
        np.array([6]), np.array([0]), np.array([True]), np.zeros((1, *FRAME), np.uint8)
    )
    with pytest.raises(InvalidBatchError, match="all 2 streams this store keeps apart still"):
        put(store, 7, [0], True)


def test_a_stream_whose_frames_are_all_gone_gives_its_place_to_a_new_one() -> None:
    # Two places; the ring keeps 8 frames, so stream 1's frames age out under stream 2's.
    store = FrameStackStorage(make_spec(2), 16, frame_capacity=8, max_streams=2)
    put(store, 1, [0, 1], [True, False])
    put(store, 2, range(10), np.arange(10) == 0)
    put(store, 3, [0, 1, 2], [True, False, False])  # takes stream 1's place
    assert store.streams.reclaimed == 1
    store.write(records([1], [2], stream=3), 1)
    np.testing.assert_array_equal(store.gather(np.array([0]))["next_obs"][0], stack_of(3, (1, 2)))
    with pytest.raises(InvalidBatchError, match="does not hold"):
        store.write(records([0], [1], stream=1), 1)  # stream 1 is no longer known
    # Stream 2 still holds frames: a fourth stream finds no place.
    with pytest.raises(InvalidBatchError, match="still hold frames"):
        put(store, 4, [0], True)


def test_one_stored_frame_per_step_instead_of_two_stacks() -> None:
    spec = FrameStackSpec((84, 84), "uint8", 4, SCALARS)
    capacity = 20_000  # the arrays are allocated, not touched: zero pages cost nothing
    store = FrameStackStorage(spec, capacity, max_streams=1024)
    whole = spec.transition_spec.item_nbytes
    assert whole == 2 * 4 * 84 * 84 + 16  # two stacks of 4 frames, stored whole
    frames = store._arena.nbytes
    assert frames == (capacity + capacity // 128 + 1024) * 84 * 84
    # Everything else (links, positions, counts, references, scalars): under 90 bytes a
    # transition,
    # the stream table aside (1024 streams × 256 numbers × 4 bytes, whatever the capacity).
    overhead = store.nbytes - frames - store._table.nbytes
    assert overhead / capacity < 90, overhead / capacity


def test_frames_compressed_by_the_writer_are_checked_then_served() -> None:
    import lz4.block

    store = FrameStackStorage(make_spec(2), 8, compress=True)
    frames = [frame_of(3, k) for k in range(3)]
    blobs = [lz4.block.compress(f.tobytes(), store_size=False) for f in frames]
    offsets = np.cumsum([0, *(len(b) for b in blobs)])
    data = np.frombuffer(b"".join(blobs), np.uint8)
    store.add_compressed_frames(
        np.full(3, 3), np.arange(3), np.array([1, 0, 0], bool), data, offsets
    )
    store.write(records([1], [2], stream=3), 1)
    np.testing.assert_array_equal(store.gather(np.array([0]))["next_obs"][0], np.stack(frames[1:]))
    garbled = data.copy()
    garbled[offsets[1] : offsets[2]] = 255
    for bad_data, bad_offsets, pattern in (
        (garbled, offsets, "frame 1 does not decode"),
        (data, offsets[:-1], "offsets"),
        (data, offsets + 1, "do not cut the data"),
        (data[:-1], offsets, "do not cut the data"),
    ):
        with pytest.raises(InvalidBatchError, match=pattern):
            store.add_compressed_frames(
                np.full(3, 3), np.arange(10, 13), np.zeros(3, bool), bad_data, bad_offsets
            )
    whole = FrameStackStorage(make_spec(2), 8)
    with pytest.raises(InvalidBatchError, match="keeps frames whole"):
        whole.add_compressed_frames(np.full(3, 3), np.arange(3), np.ones(3, bool), data, offsets)


def test_a_short_arena_drops_the_oldest_frames_and_their_transitions_first() -> None:
    store = FrameStackStorage(make_spec(2), 64, compress=True, arena_bytes=200)
    for number in range(60):
        put(store, 1, [number], number == 0)
        if number:
            store.write(records([number - 1], [number], stream=1), 1)
    assert store.evicted_early > 0  # the arena, not the rings, ran out
    assert store.frame_bytes_stored <= 200
    live = np.flatnonzero(store.generations >= 0)
    gathered = store.gather(live)
    for position, slot in enumerate(live):
        newest = store.generations[slot] + 1  # record g refers to frames g and g + 1
        np.testing.assert_array_equal(gathered["next_obs"][position][-1], frame_of(1, newest))


@pytest.mark.parametrize("compress", [True, False])
def test_packed_samples_carry_each_frame_once_and_unpack_to_the_same_stacks(compress) -> None:
    from replay.frames.payload import unpack
    from replay.protocol.sample_reply import SampleReply
    from replay.wire.layout import decode, encode

    rng = np.random.default_rng(4)
    streams = built_streams(20, 3, [7, 3, 11])
    store = FrameStackStorage(make_spec(4), 40, compress=compress)
    feed(store, streams, rng)
    slots = rng.choice(np.flatnonzero(store.generations >= 0), 200)  # parts on threads
    scalars, payload = store.gather_packed(slots)
    whole = store.gather(slots)
    stacks = unpack(payload, make_spec(4))
    np.testing.assert_array_equal(stacks["obs"], whole["obs"])
    np.testing.assert_array_equal(stacks["next_obs"], whole["next_obs"])
    np.testing.assert_array_equal(scalars["action"], whole["action"])
    assert payload.offsets.size - 1 == np.unique(payload.index).size <= 40 * 8
    # Through the wire, as a frame shard answers SAMPLE.
    spec = make_spec(4).transition_spec
    reply = SampleReply(
        1.0,
        0.5,
        40,
        40,
        slots,
        np.zeros(200, np.int64),
        np.ones(200),
        np.ones(200, np.float32),
        scalars,
        payload,
    )
    frames = [
        bytes(memoryview(f).cast("B")) if not isinstance(f, bytes) else f
        for f in encode(reply.to_message(0, 1))
    ]
    got = SampleReply.from_message(decode(frames), spec)
    assert list(got.fields) == list(spec)
    np.testing.assert_array_equal(got.fields["next_obs"], whole["next_obs"])
    # Into the free rows of a larger batch, as the sampler assembles one: written there,
    # the rows before and after left alone; too few rows is the shard's error, not a crash.
    batch = {name: np.full((260, *f.shape), 7, f.dtype) for name, f in spec.items()}
    free = {name: rows[50:] for name, rows in batch.items()}
    placed = SampleReply.from_message(decode(frames), spec, free)
    for name in spec:
        assert np.shares_memory(placed.fields[name], batch[name])
        np.testing.assert_array_equal(batch[name][50:250], whole[name])
        assert (batch[name][:50] == 7).all() and (batch[name][250:] == 7).all()
    with pytest.raises(ProtocolError, match="free rows"):
        SampleReply.from_message(decode(frames), spec, {n: r[100:] for n, r in batch.items()})


@pytest.mark.parametrize("compress", [True, False])
def test_a_batch_gathered_on_several_threads_is_the_reference(compress) -> None:
    rng = np.random.default_rng(8)
    streams = built_streams(50, 4, [40, 9, 70])
    store = FrameStackStorage(make_spec(4), 300, compress=compress, gather_threads=3)
    written = feed(store, streams, rng)
    assert check_live(store, written) == 300  # one batch of 300: three parts
    slots = rng.integers(0, 300, 1000)
    parts = store.gather(slots)
    store._gather_threads = 1
    whole = store.gather(slots)
    for name in ("obs", "next_obs", "action"):
        np.testing.assert_array_equal(parts[name], whole[name])


def test_run_in_parts_covers_each_item_once_and_reraises() -> None:
    from replay.store.parts import run_in_parts

    seen = np.zeros(1000, dtype=np.int64)
    run_in_parts(1000, lambda start, stop: np.add.at(seen, np.arange(start, stop), 1), 4)
    assert (seen == 1).all()

    def fail_late(start: int, stop: int) -> None:
        if start > 0:
            raise ValueError("part failed")

    with pytest.raises(ValueError, match="part failed"):
        run_in_parts(1000, fail_late, 4)


def test_a_packed_payload_that_does_not_fit_is_refused() -> None:
    from replay.errors import ProtocolError
    from replay.frames.payload import FramePayload, unpack

    store = small_store()
    store.write(records([3], [5]), 1)
    _, payload = store.gather_packed(np.array([0]))
    layout = make_spec(4)
    stalled = payload.offsets.copy()
    stalled[1] = 0  # an empty first frame
    for broken, pattern in (
        (FramePayload(payload.index + 99, payload.data, payload.offsets, False), "outside"),
        (FramePayload(payload.index[:, :4], payload.data, payload.offsets, False), "expected"),
        (FramePayload(payload.index, payload.data[:-1], payload.offsets, False), "cut the data"),
        (FramePayload(payload.index, payload.data, payload.offsets, True), "does not decode"),
        (FramePayload(payload.index, payload.data, stalled, False), "must rise"),
    ):
        with pytest.raises(ProtocolError, match=pattern):
            unpack(broken, layout)


def _allocated_nbytes(*owners: object) -> int:
    """The bytes of every array the objects hold (directly or in a dict), each buffer once."""
    buffers: dict[int, int] = {}
    for owner in owners:
        for value in vars(owner).values():
            for array in value.values() if isinstance(value, dict) else (value,):
                if isinstance(array, np.ndarray):
                    base = array if array.base is None else array.base
                    buffers[id(base)] = max(buffers.get(id(base), 0), base.nbytes)
    return sum(buffers.values())


@pytest.mark.parametrize("compress", [False, True])
def test_the_planned_bytes_of_a_store_are_those_it_allocates(compress: bool) -> None:
    """What a run's preflight adds up before a shard starts (``ShardConfig.planned_nbytes``)
    is what the stores and the sum tree allocate, within 2%."""
    from replay.frames.sizing import planned_nbytes
    from replay.store.storage import RingStorage
    from replay.store.sum_tree import SumTree

    pytest.importorskip("lz4") if compress else None
    spec = FrameStackSpec((84, 84), "uint8", 4, SCALARS)
    frames = FrameStackStorage(spec, 5_000, compress=compress)
    planned = planned_nbytes(spec, 5_000, compress)
    assert _allocated_nbytes(frames, frames.streams) == pytest.approx(planned, rel=0.02)
    dense = TransitionSpec.from_dict({"obs": ((4,), "float32"), "action": ((), "int64")})
    ring = RingStorage(dense, 10_000)
    assert _allocated_nbytes(ring) == pytest.approx(
        RingStorage.planned_nbytes(dense, 10_000), rel=0.02
    )
    tree = SumTree(10_000)
    assert _allocated_nbytes(tree) == pytest.approx(SumTree.planned_nbytes(10_000), rel=0.02)
