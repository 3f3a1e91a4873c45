"""Snapshot suite: what a shard's snapshot costs the service, and what it takes to come back.

Per case (a shard filled to its capacity, CartPole-sized or Pong frames):

* sample latency: one learner-like client sends SAMPLE requests of 512 back to back, while
  a paced pusher inserts; latencies are split into those that started while a snapshot's
  child was writing and those that did not (snapshots are asked for again and again until
  the window ends), and p50/p99 of each are reported, with their ratio;
* ingest during snapshots, transitions/s;
* snapshot seconds (fork to reaped child) and bytes on disk;
* restore: a new shard process started with ``--restore`` until it is ready, and the
  transitions it holds (checked equal to the snapshot's).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

import numpy as np

from bench.parts.sample_service import fill_shards
from bench.parts.shard_processes import INSERT_BATCH, start_pusher, start_shard
from bench.parts.snapshot_fill import fill_records
from bench.report import ok_record
from launch.supervision.role_process import stop_all

SUITE = "snapshot"
SAMPLE_BATCH = 512


def _record(
    case: str, implementation: str, metric: str, unit: str, values: list[float], params: dict
) -> dict:
    return ok_record(SUITE, case, implementation, metric, unit, values, params)


def _latencies(client, spec, info, seconds: float, snapshot: bool) -> tuple[list, list, list]:
    """SAMPLE latencies (s) outside and during snapshots, and each snapshot's record."""
    outside, during, written = [], [], []
    in_progress, last_poll, seen = False, 0.0, info()["snapshots_written"]
    deadline = time.monotonic() + seconds
    # With snapshots: at least one must complete (a paced Pong snapshot takes ~10 s).
    hard_deadline = deadline + 600
    while time.monotonic() < deadline or (
        snapshot and not written and time.monotonic() < hard_deadline
    ):
        now = time.monotonic()
        if now - last_poll > 0.02:  # look at the shard's state every 20 ms
            state = info()
            in_progress, last_poll = state["snapshot_in_progress"], time.monotonic()
            if state["snapshots_written"] > seen:
                seen = state["snapshots_written"]
                written.append(state["last_snapshot"])
            if snapshot and not in_progress:
                client.snapshot()  # the shard forks its writer in its next round
                in_progress = True
        started = time.monotonic()
        client.sample(SAMPLE_BATCH, 0.4, spec)
        (during if in_progress else outside).append(time.monotonic() - started)
    return outside, during, written


def _case(kind: str, capacity: int, seconds: float, rate: float, progress) -> list[dict]:
    import zmq

    from bench.parts.shard_worker import transition_spec
    from replay.inserts.endpoints import ShardEndpoints
    from replay.protocol.requests import RequestClient

    spec = transition_spec("atari" if kind == "atari-frames" else kind)
    case = f"{kind}-{capacity}"
    params = {"capacity": capacity, "batch_size": SAMPLE_BATCH, "ingest_rate": rate}
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="apex-snapshots-") as root:
        shard, ready = start_shard(kind, capacity, extra=("--snapshot-dir", root))
        context = zmq.Context()
        pusher = None
        try:
            endpoints = [ShardEndpoints(ready["insert"], ready["request"])]
            progress(f"snapshot {case}: filling")
            fill_shards(kind, context, endpoints, spec, capacity)
            client = RequestClient(context, ready["request"], sender=99, timeout_s=30.0)
            watcher = RequestClient(context, ready["request"], sender=97, timeout_s=30.0)
            pusher = start_pusher("apex", kind, 100, [ready], 3 * seconds + 60, rate=rate)
            progress(f"snapshot {case}: sampling, without and with snapshots")
            outside, _, _ = _latencies(client, spec, watcher.info, seconds, snapshot=False)
            before = watcher.info()["transitions_added"]
            started = time.monotonic()
            _, during, written = _latencies(client, spec, watcher.info, seconds, True)
            ingest = (watcher.info()["transitions_added"] - before) / (time.monotonic() - started)
            _wait_idle(watcher.info)
            held = watcher.info()["size"]
            client.close()
            watcher.close()
        finally:
            stop_all([p for p in (pusher,) if p is not None])
            stop_all([shard], budget_s=300)  # its final snapshot is written before it exits
            context.destroy(linger=0)
        if not during or not written:
            raise RuntimeError(f"{case}: no sample ran during a snapshot")
        for name, values in (("sample_p50", (outside, during)), ("sample_p99", (outside, during))):
            q = 50 if name == "sample_p50" else 99
            for implementation, samples in zip(
                ("no-snapshot", "snapshotting"), values, strict=True
            ):
                value = float(np.percentile(samples, q)) * 1e3
                records.append(
                    {
                        **_record(case, implementation, name, "ms", [value], params),
                        "params": {**params, "samples": len(samples)},
                    }
                )
        records.append(_record(case, "snapshotting", "ingest", "transitions/s", [ingest], params))
        seconds_taken = [w["seconds"] for w in written]
        records.append(_record(case, "apex", "snapshot_time", "s", seconds_taken, params))
        sizes = [float(w["bytes"]) for w in written]
        records.append(_record(case, "apex", "snapshot_bytes", "bytes", sizes, params))
        progress(f"snapshot {case}: restoring")
        restore_s = _restore(kind, capacity, root, held)
        records.append(_record(case, "apex", "restore_time", "s", [restore_s], params))
    return records


def _wait_idle(info: Callable[[], dict]) -> None:
    deadline = time.monotonic() + 120
    while info()["snapshot_in_progress"]:
        if time.monotonic() > deadline:
            raise RuntimeError("a snapshot never finished")
        time.sleep(0.05)


def _restore(kind: str, capacity: int, root: str, held: int) -> float:
    """Seconds from starting a shard with ``--restore`` to its ready line; checks that it
    holds what was snapshotted last (the shard's final snapshot at SIGTERM)."""
    import zmq

    from replay.protocol.requests import RequestClient

    started = time.monotonic()
    shard, ready = start_shard(kind, capacity, extra=("--restore", root))
    seconds = time.monotonic() - started
    context = zmq.Context()
    try:
        client = RequestClient(context, ready["request"], sender=99, timeout_s=30.0)
        size = client.info()["size"]
        client.close()
    finally:
        stop_all([shard], budget_s=300)
        context.destroy(linger=0)
    if size < held:
        raise RuntimeError(f"restored {size} transitions, the shard held {held}")
    return seconds


FILLS = (0.05, 0.5, 1.0)


def run(
    *, quick: bool = False, progress: Callable[[str], None] | None = None, part: str = "all"
) -> dict:
    say = progress or (lambda _line: None)
    seconds = 2.0 if quick else 8.0
    cases = (
        [("small", 1 << 14, 20_000.0), ("atari-frames", 4_096, 2_000.0)]
        if quick
        else [("small", 1_000_000, 20_000.0), ("atari-frames", 1_000_000, 5_000.0)]
    )
    # The fill cases: a CartPole-sized shard and a Pong shard of the Pong preset's size.
    fill_cases = [
        (kind, capacity, fraction)
        for kind, capacity in (
            (("small", 1 << 14), ("atari-frames", 4_096))
            if quick
            else (("small", 1_000_000), ("atari-frames", 2_000_000))
        )
        for fraction in FILLS
    ]
    records = fill_records(fill_cases, SUITE, say) if part in ("all", "fill") else []
    if part == "fill":
        return {
            "records": records,
            "ratios": [],
            "config": {"quick": quick, "part": part, "fill_cases": fill_cases},
        }
    for kind, capacity, rate in cases:
        records += _case(kind, capacity, seconds, rate, say)
    ratios = []
    by = {(r["case"], r["implementation"], r["metric"]): r["median"] for r in records}
    for kind, capacity, _ in cases:
        case = f"{kind}-{capacity}"
        ratios.append(
            {
                "suite": SUITE,
                "case": case,
                "metric": "sample_p99",
                "numerator": "snapshotting",
                "denominator": "no-snapshot",
                "ratio": by[(case, "snapshotting", "sample_p99")]
                / by[(case, "no-snapshot", "sample_p99")],
            }
        )
    config = {
        "quick": quick,
        "part": part,
        "seconds": seconds,
        "insert_batch": INSERT_BATCH,
        "cases": [list(c) for c in cases],
        "fill_cases": fill_cases,
    }
    return {"records": records, "ratios": ratios, "config": config}
