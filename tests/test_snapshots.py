"""Shard snapshots: the file format refuses what it cannot trust, a store comes back exactly,
and a live shard snapshots while it serves and comes back after SIGTERM or kill -9."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import zmq

from replay import PrioritizedReplay
from replay.errors import ReplayTimeout
from replay.frames.lz4_codec import compress_bound
from replay.frames.storage import FrameStackStorage
from replay.inserts.client import InsertClient
from replay.protocol.requests import RequestClient
from replay.server.credit_desk import MAX_WINDOW
from replay.server.snapshots import replay_state, restore_replay
from replay.store.snapshot import (
    SnapshotError,
    complete_snapshots,
    load_newest,
    open_snapshot,
    write_snapshot,
)
from replay.store.state import Rows
from tests.conftest import SMALL_SPEC, ShardProcess, make_batch, wait_for
from tests.test_frame_storage import built_streams, feed, make_spec


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "a": rng.random((40, 3)),
        "b.c": np.arange(7, dtype=np.int32),
        "flags": np.ones(5, bool),
    }


def test_a_snapshot_round_trips_and_keeps_the_previous_until_complete(tmp_path: Path) -> None:
    arrays = _arrays()
    for sequence in (1, 2, 3):
        write_snapshot(tmp_path, sequence, arrays, {"n": sequence})
    assert [s for s, _ in complete_snapshots(tmp_path)] == [3, 2]  # keep=2
    snapshot = open_snapshot(tmp_path / "snapshot-000003")
    assert snapshot.meta == {"n": 3}
    for name, array in arrays.items():
        np.testing.assert_array_equal(snapshot.read(name), array)
    out = np.empty(7, dtype=np.int32)
    assert snapshot.read("b.c", out) is out
    with pytest.raises(SnapshotError, match="holds"):
        snapshot.read("b.c", np.empty(8, dtype=np.int32))
    # A write that fails leaves no snapshot under a final name, and the older ones stay.
    with pytest.raises(SnapshotError, match="name"):
        write_snapshot(tmp_path, 4, {"Bad/Name": arrays["a"]}, {})
    assert [s for s, _ in complete_snapshots(tmp_path)] == [3, 2]
    assert not list(tmp_path.glob(".partial-*"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest", "version", "dtype", "path"])
def test_a_damaged_snapshot_is_refused_and_the_previous_one_used(tmp_path: Path, damage) -> None:
    arrays = _arrays()
    write_snapshot(tmp_path, 1, arrays, {"n": 1})
    newest = write_snapshot(tmp_path, 2, arrays, {"n": 2})
    manifest = json.loads((newest / "manifest.json").read_text())
    data = newest / manifest["arrays"]["a"]["file"]
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:-8])
    elif damage == "flip":
        raw = bytearray(data.read_bytes())
        raw[100] ^= 0x40
        data.write_bytes(bytes(raw))
    elif damage == "manifest":
        (newest / "manifest.json").write_text('{"format": "apex-replay-snap')
    else:
        if damage == "version":
            manifest["version"] = 99
        elif damage == "dtype":
            manifest["arrays"]["a"]["dtype"] = "|O"
        else:
            manifest["arrays"]["a"]["file"] = "../../etc/passwd"
        (newest / "manifest.json").write_text(json.dumps(manifest))
    loaded = {}

    def load(snapshot) -> None:
        for name in snapshot.arrays:
            loaded[name] = snapshot.read(name)
        loaded["meta"] = snapshot.meta

    snapshot, refused = load_newest(tmp_path, load)
    assert snapshot is not None and snapshot.meta == {"n": 1}
    assert len(refused) == 1 and "snapshot-000002" in refused[0]
    np.testing.assert_array_equal(loaded["a"], arrays["a"])


def _filled_ring(seed: int) -> PrioritizedReplay:
    replay = PrioritizedReplay(SMALL_SPEC, 50, 0.6, rng=seed)
    rng = np.random.default_rng(seed)
    for start in range(0, 130, 13):  # wraps the ring twice
        replay.add(make_batch(SMALL_SPEC, 13, start), rng.uniform(0.1, 3.0, 13))
    sample = replay.sample(8, 0.4)
    replay.update_priorities(sample.indices, sample.generations, rng.uniform(0.1, 3.0, 8))
    return replay


def _same_future(first: PrioritizedReplay, second: PrioritizedReplay) -> None:
    """Both give the same samples and take the same writes from here on."""
    for round_ in range(3):
        a, b = first.sample(16, 0.4), second.sample(16, 0.4)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.generations, b.generations)
        np.testing.assert_allclose(a.weights, b.weights)
        for name in a.transitions:
            np.testing.assert_array_equal(a.transitions[name], b.transitions[name])
        if isinstance(first.storage, FrameStackStorage):
            continue
        batch = make_batch(SMALL_SPEC, 5, 1000 + 5 * round_)
        first.add(batch, np.full(5, 2.0))
        second.add(batch, np.full(5, 2.0))
    assert first.items_added == second.items_added and first.size == second.size
    assert first.total_priority == pytest.approx(second.total_priority, rel=1e-12)


def _through_disk(replay: PrioritizedReplay, fresh: PrioritizedReplay, root: Path) -> None:
    arrays, meta = replay_state(replay)
    snapshot = open_snapshot(write_snapshot(root, 1, arrays, meta))
    restore_replay(fresh, snapshot.read, snapshot.meta)


def test_a_ring_store_comes_back_exactly(tmp_path: Path) -> None:
    replay = _filled_ring(3)
    fresh = PrioritizedReplay(SMALL_SPEC, 50, 0.6, rng=77)
    _through_disk(replay, fresh, tmp_path)
    assert fresh.dropped_updates == replay.dropped_updates
    _same_future(replay, fresh)


@pytest.mark.parametrize("compress", [False, True], ids=["whole", "lz4"])
def test_a_frame_store_comes_back_exactly(tmp_path: Path, compress: bool) -> None:
    def make(seed: int) -> PrioritizedReplay:
        storage = FrameStackStorage(make_spec(4), 60, compress=compress, frame_capacity=90)
        return PrioritizedReplay(None, 60, 0.6, rng=seed, storage=storage)

    replay = make(5)
    streams = built_streams(40, 3, [9, 30, 12, 25])
    feed(replay.storage, streams, np.random.default_rng(2), replay=replay)
    fresh = make(99)
    _through_disk(replay, fresh, tmp_path)
    assert fresh.storage.frames_stored == replay.storage.frames_stored
    assert fresh.storage.streams.ids_array().tolist() == replay.storage.streams.ids_array().tolist()
    _same_future(replay, fresh)


def _written_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.bin"))


@pytest.mark.parametrize("items", [0, 7, 49, 50, 130])
def test_a_partly_filled_ring_is_written_by_what_it_holds_and_comes_back(
    tmp_path: Path, items: int
) -> None:
    replay = PrioritizedReplay(SMALL_SPEC, 50, 0.6, rng=3)
    rng = np.random.default_rng(items)
    for start in range(0, items, 13):
        count = min(13, items - start)
        replay.add(make_batch(SMALL_SPEC, count, start), rng.uniform(0.1, 3.0, count))
    fresh = PrioritizedReplay(SMALL_SPEC, 50, 0.6, rng=77)
    _through_disk(replay, fresh, tmp_path)
    held = min(items, 50)
    # Rows, generations and priorities of the slots in use, nothing for the others.
    assert _written_bytes(tmp_path) == held * (SMALL_SPEC.item_nbytes + 8 + 8)
    assert fresh.size == held and fresh.items_added == items
    np.testing.assert_array_equal(fresh.storage.generations, replay.storage.generations)
    if held:
        _same_future(replay, fresh)


@pytest.mark.parametrize("compress", [False, True], ids=["whole", "lz4"])
@pytest.mark.parametrize(
    ("episodes", "arena_frames"),
    [([5], None), ([9, 30], None), ([9, 30, 12, 25] * 2, None), ([9, 30, 12, 25] * 2, 70)],
    ids=["few", "some", "wrapped", "arena-wrapped"],
)
def test_a_frame_store_is_written_by_what_it_holds_and_comes_back(
    tmp_path: Path, compress: bool, episodes: list[int], arena_frames: int | None
) -> None:
    spec = make_spec(4)

    def make(seed: int) -> PrioritizedReplay:
        # About arena_frames frames (an LZ4 block of a 6-byte frame takes 7 or 8 bytes).
        per_frame = spec.frame_nbytes + (2 if compress else 0)
        arena = arena_frames * per_frame if arena_frames else None
        storage = FrameStackStorage(
            spec, 60, compress=compress, frame_capacity=90, arena_bytes=arena
        )
        return PrioritizedReplay(None, 60, 0.6, rng=seed, storage=storage)

    replay = make(5)
    feed(
        replay.storage,
        built_streams(40, 3, episodes),
        np.random.default_rng(2),
        replay=replay,
    )
    fresh = make(99)
    _through_disk(replay, fresh, tmp_path)
    store = replay.storage
    assert fresh.storage.frames_stored == store.frames_stored and fresh.size == replay.size
    _same_future(replay, fresh)
    # The arena part is the bytes of the frames held, give or take the end of a lap.
    arena = next(tmp_path.rglob("*-storage.arena.bin")).stat().st_size
    lap_end = compress_bound(spec.frame_nbytes) if compress else spec.frame_nbytes
    assert store.frame_bytes_stored <= arena <= store.frame_bytes_stored + lap_end
    if arena_frames:  # the case is the one it names: the byte ring went round
        assert store._cursor[2] > store._arena.size


def test_a_version_1_snapshot_of_whole_arrays_is_still_read(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, 1, _arrays(), {"n": 1})
    manifest = json.loads((path / "manifest.json").read_text())
    assert all("ranges" not in entry for entry in manifest["arrays"].values())
    (path / "manifest.json").write_text(json.dumps({**manifest, "version": 1}))
    snapshot = open_snapshot(path)
    for name, array in _arrays().items():
        np.testing.assert_array_equal(snapshot.read(name), array)


@pytest.mark.parametrize(
    "ranges", [[[3, 2]], [[0, 50]], [[5, 9], [7, 12]], "rows", [[0, 1, 2]], [[True, 2]]]
)
def test_row_ranges_that_do_not_fit_the_array_are_refused(tmp_path: Path, ranges) -> None:
    path = write_snapshot(tmp_path, 1, {"a": Rows.prefix(np.arange(40.0), 40)}, {})
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["arrays"]["a"]["ranges"] = ranges
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SnapshotError, match=r"bad row ranges|holds"):
        open_snapshot(path)


def test_a_snapshot_of_another_store_is_refused_by_name(tmp_path: Path) -> None:
    replay = _filled_ring(1)
    arrays, meta = replay_state(replay)
    snapshot = open_snapshot(write_snapshot(tmp_path, 1, arrays, meta))
    with pytest.raises(SnapshotError, match="capacity: snapshot 50, here 64"):
        restore_replay(PrioritizedReplay(SMALL_SPEC, 64, 0.6), snapshot.read, snapshot.meta)
    with pytest.raises(SnapshotError, match="alpha"):
        restore_replay(PrioritizedReplay(SMALL_SPEC, 50, 0.5), snapshot.read, snapshot.meta)
    other = PrioritizedReplay(None, 50, 0.6, storage=FrameStackStorage(make_spec(4), 50))
    with pytest.raises(SnapshotError, match="built differently"):
        restore_replay(other, snapshot.read, snapshot.meta)


def _shard(*extra: str) -> ShardProcess:
    return ShardProcess("--capacity", "100000", "--min-size", "1", *extra)


def _insert(context: zmq.Context, shard: ShardProcess, batches: int, sender: int) -> None:
    client = InsertClient(context, [shard.endpoints], sender=sender, spec=SMALL_SPEC)
    for i in range(batches):
        client.insert(make_batch(SMALL_SPEC, 500, i * 500), np.full(500, 1.0 + i))
    client.close(linger_s=5.0)


@pytest.mark.slow
def test_a_shard_snapshots_while_serving_and_comes_back_after_sigterm_and_kill(
    tmp_path: Path, context: zmq.Context
) -> None:
    root = tmp_path / "shard-0"
    shard = _shard("--snapshot-dir", str(root), "--snapshot-interval", "3600")
    try:
        _insert(context, shard, 40, sender=5)  # 20,000 transitions
        client = RequestClient(context, shard.endpoints.request, sender=99, timeout_s=10.0)
        wait_for(lambda: client.info()["transitions_added"] == 20_000, what="inserts")
        assert client.snapshot()["snapshots_written"] == 0
        # The shard serves while its child writes.
        for _ in range(5):
            assert client.sample(64, 0.4, SMALL_SPEC).fields["obs"].shape == (64, 4)
        # The child runs at SCHED_IDLE: on a machine busy with other tests it waits its turn.
        done = wait_for(
            lambda: (i := client.info())["snapshots_written"] and i, 60.0, what="snapshot"
        )
        assert done["last_snapshot"]["how"] == "background"
        _insert(context, shard, 4, sender=6)  # 2,000 more, after the snapshot
        wait_for(lambda: client.info()["transitions_added"] == 22_000, what="more inserts")
        client.close()
    finally:
        assert shard.stop() == 0  # SIGTERM: a final snapshot of all 22,000
    assert [s for s, _ in complete_snapshots(root)] == [2, 1]

    shard = _shard("--restore", str(root))
    try:
        client = RequestClient(context, shard.endpoints.request, sender=99, timeout_s=10.0)
        info = client.info()
        assert info["size"] == 22_000 and info["transitions_added"] == 22_000
        assert info["senders"]["5"]["transitions"] == 20_000
        assert info["senders"]["6"]["transitions"] == 2_000
        reply = client.sample(256, 0.4, SMALL_SPEC)
        ids = reply.fields["action"]
        # Priorities came back: batch i had priority 1 + i, so high ids dominate.
        assert np.median(ids) > 10_000
        client.close()
        shard.process.send_signal(signal.SIGKILL)  # no final snapshot now
        shard.process.wait(10)
    finally:
        shard.stop()
    # After kill -9 the newest snapshot (SIGTERM's) is what comes back.
    shard = _shard("--restore", str(root))
    try:
        client = RequestClient(context, shard.endpoints.request, sender=99, timeout_s=10.0)
        assert client.info()["size"] == 22_000
        client.close()
    finally:
        shard.stop()


def test_restore_refuses_to_start_empty_over_unusable_snapshots(tmp_path: Path) -> None:
    replay = _filled_ring(0)
    arrays, meta = replay_state(replay)
    write_snapshot(tmp_path, 1, arrays, meta)  # capacity 50: not the shard's 100000
    with pytest.raises(AssertionError, match="no usable snapshot"):
        _shard("--restore", str(tmp_path))


@pytest.mark.slow
def test_a_client_out_of_credit_carries_on_with_a_restarted_shard(
    tmp_path: Path, context: zmq.Context
) -> None:
    # Nothing samples: the limiter stops inserts, the client runs out of credit, and its
    # last CREDIT question goes unanswered when the shard is killed. The restarted shard
    # (same ports, its snapshot) counts its senders' messages anew; the client must see that
    # from the answer's incarnation and start counting again, or wait forever.
    limits = ("--min-size", "100", "--samples-per-insert", "1", "--error-buffer", "400")
    shard = ShardProcess("--capacity", "10000", *limits, "--snapshot-dir", str(tmp_path))
    # A queue deeper than the shard's window (of small batches, MAX_WINDOW): the credit is
    # what stops the client.
    client = InsertClient(
        context, [shard.endpoints], sender=5, spec=SMALL_SPEC, timeout_s=0.5, hwm=2 * MAX_WINDOW
    )
    try:
        sent = 0
        with pytest.raises(ReplayTimeout):
            for i in range(1000):
                client.insert(make_batch(SMALL_SPEC, 50, i * 50), np.ones(50))
                sent += 1
        assert sent < 1000
        shard.process.send_signal(signal.SIGKILL)
        shard.process.wait(10)
        shard.stop()
        # An empty restart with the limiter open: the client's batches must flow again.
        ports = [e.rsplit(":", 1)[1] for e in (shard.endpoints.insert, shard.endpoints.request)]
        shard = ShardProcess(
            "--capacity",
            "10000",
            "--insert-port",
            ports[0],
            "--request-port",
            ports[1],
            "--restore",
            str(tmp_path),
        )

        def flows() -> bool:
            try:
                client.insert(make_batch(SMALL_SPEC, 50, 0), np.ones(50))
            except ReplayTimeout:
                return False
            return True

        for _ in range(30):  # far beyond one credit limit: credit was given back
            wait_for(flows, timeout_s=15, what="inserts into the restarted shard")
        assert client._credits[0].restarts_seen == 1
    finally:
        client.close(linger_s=0)
        shard.stop()
