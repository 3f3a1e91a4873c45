"""What a shard's snapshot weighs, and what restoring it costs, at a given fill.

A shard (a real ``apex replay`` process) of ``capacity`` is filled to a fraction of it,
asked for a snapshot (SNAPSHOT), and killed; a new shard restores that snapshot. Per case:

* ``content_bytes``: what the K transitions it holds occupy in its memory: for whole
  transitions, K rows of the spec plus a generation and a priority each; for a frame shard,
  the frames it holds (compressed as held) with their per-frame links, plus K records,
  frame heads, generations and priorities;
* ``snapshot_bytes``: the snapshot's files on disk (allocated blocks, so a sparse file
  would not flatter it), and its ratio to the content;
* ``snapshot_time``: fork to reaped child, as the shard reports it;
* ``restore_time``: start to ready line of the restoring shard;
* ``restore_peak_rss`` against ``empty_peak_rss``: the peak resident memory (VmHWM) of the
  restoring shard, and of the same shard started empty.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

from bench.parts.sample_service import fill_shards
from bench.parts.shard_processes import start_shard
from launch.supervision.role_process import stop_all

SNAPSHOT_TIMEOUT_S = 600.0
# Per-frame links a frame store keeps beside each frame's bytes (replay.frames.storage):
# position 8, length 4, stream 4, number 8, generation 8, prev 4, prev generation 8,
# depth 1, refs 4.
FRAME_LINK_BYTES = 49
# Per transition beyond its fields: generation 8 and priority (sum-tree leaf) 8; a frame
# store adds its two frame heads, 4 bytes each.
SLOT_BYTES = 16
FRAME_HEAD_BYTES = 8


def _shard(kind: str, capacity: int, *extra: str):
    return start_shard(kind, capacity, extra=extra, timeout_s=SNAPSHOT_TIMEOUT_S)


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def _settled(client, at_least: int) -> None:
    """Waits until the shard has taken in the fill (sends return before it stores them),
    so that the snapshot asked for next holds all of it."""
    deadline = time.monotonic() + SNAPSHOT_TIMEOUT_S
    previous = -1
    while time.monotonic() < deadline:
        added = client.info()["transitions_added"]
        if added >= at_least and added == previous:
            return
        previous = added
        time.sleep(0.2)
    raise RuntimeError(f"the shard took in {previous} of {at_least} transitions")


def content_bytes(kind: str, spec, info: dict) -> int:
    """What the transitions a shard holds occupy in its memory (see the module doc)."""
    size = info["size"]
    if kind != "atari-frames":
        return size * (spec.item_nbytes + SLOT_BYTES)
    from replay.frames.spec import FrameStackSpec

    records = FrameStackSpec.from_transition_spec(spec).record_spec.item_nbytes
    frames = info["frames_stored"] * FRAME_LINK_BYTES + info["frame_bytes_stored"]
    return frames + size * (records + SLOT_BYTES + FRAME_HEAD_BYTES)


def measure_fill(kind: str, capacity: int, fraction: float) -> dict:
    """One case: fill, snapshot, kill, restore; the figures of the module doc."""
    import zmq

    from bench.parts.shard_worker import transition_spec
    from replay.inserts.endpoints import ShardEndpoints
    from replay.protocol.requests import RequestClient

    spec = transition_spec("atari" if kind == "atari-frames" else kind)
    with tempfile.TemporaryDirectory(prefix="apex-snapshot-fill-") as directory:
        root = Path(directory)
        context = zmq.Context()
        shard, ready = _shard(kind, capacity, "--snapshot-dir", str(root))
        try:
            endpoints = [ShardEndpoints(ready["insert"], ready["request"])]
            wanted = max(1, int(capacity * fraction))
            fill_shards(kind, context, endpoints, spec, wanted)
            client = RequestClient(context, ready["request"], sender=99, timeout_s=60.0)
            _settled(client, min(wanted, capacity))
            client.snapshot()
            deadline = time.monotonic() + SNAPSHOT_TIMEOUT_S
            while not (info := client.info())["snapshots_written"]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind}: no snapshot within {SNAPSHOT_TIMEOUT_S} s")
                time.sleep(0.05)
            client.close()
        finally:
            if shard.poll() is None:  # killed: the snapshot asked for is the one measured
                shard.process.send_signal(signal.SIGKILL)
            stop_all([shard])
        snapshot = Path(info["last_snapshot"]["path"])
        if info["last_snapshot"]["transitions"] != info["size"]:
            raise RuntimeError(
                f"the snapshot holds {info['last_snapshot']['transitions']} "
                f"transitions, the shard {info['size']}"
            )
        measured = {
            "transitions": info["size"],
            "content_bytes": content_bytes(kind, spec, info),
            "snapshot_bytes": _disk_bytes(snapshot),
            "snapshot_time_s": info["last_snapshot"]["seconds"],
        }
        empty, _ = _shard(kind, capacity)
        try:
            measured["empty_peak_rss"] = _peak_rss(empty.pid)
        finally:
            stop_all([empty])
        os.sync()  # the restore reads from the page cache either way; measured the same
        started = time.monotonic()
        restored, ready = _shard(kind, capacity, "--restore", str(root))
        try:
            measured["restore_time_s"] = time.monotonic() - started
            measured["restore_peak_rss"] = _peak_rss(restored.pid)
            client = RequestClient(context, ready["request"], sender=99, timeout_s=60.0)
            measured["restored_transitions"] = client.info()["size"]
            client.close()
        finally:
            stop_all([restored], budget_s=300)
            context.destroy(linger=0)
    if measured["restored_transitions"] != measured["transitions"]:
        raise RuntimeError(
            f"restored {measured['restored_transitions']} of {measured['transitions']} transitions"
        )
    measured["bytes_ratio"] = measured["snapshot_bytes"] / max(measured["content_bytes"], 1)
    return measured


def fill_records(cases, suite: str, progress) -> list[dict]:
    """Records of :func:`measure_fill` for each ``(kind, capacity, fraction)``."""
    from bench.report import ok_record

    records = []
    for kind, capacity, fraction in cases:
        case = f"fill-{kind}-{capacity}-{round(fraction * 100)}%"
        progress(f"snapshot {case}")
        measured = measure_fill(kind, capacity, fraction)
        params = {"capacity": capacity, "fill": fraction, "transitions": measured["transitions"]}
        for metric, unit in (
            ("content_bytes", "bytes"),
            ("snapshot_bytes", "bytes"),
            ("bytes_ratio", "x"),
            ("snapshot_time_s", "s"),
            ("restore_time_s", "s"),
            ("empty_peak_rss", "bytes"),
            ("restore_peak_rss", "bytes"),
        ):
            records.append(ok_record(suite, case, "apex", metric, unit, [measured[metric]], params))
    return records
