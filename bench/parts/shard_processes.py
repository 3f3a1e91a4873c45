"""Processes a shard benchmark is made of, and its two ingest measurements: ``apex replay``
shards, pusher and receiver workers (``bench.parts.shard_worker``), each a
``launch.supervision.role_process.RoleProcess``; ingest into a real shard
(``measure_apex``) and into a raw pyzmq receiver (``measure_raw``). The shard suite
(``bench.parts.shard_suite``), its CURVE cases (``bench.parts.curve_cases``), the sample
service (``bench.parts.sample_service``), the snapshot suites and the cost model build on
them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from bench.workers import REPO_ROOT, worker_env
from launch.supervision.role_process import RoleProcess, stop_all

INSERT_BATCH = 50
START_TIMEOUT_S = 60.0
SAMPLE_BATCH = 512
SAMPLE_PREFETCH = 8


def spawn(module: str, *arguments: str) -> RoleProcess:
    """``python -m MODULE ARGUMENTS`` from the repository, its log in a temporary file."""
    return RoleProcess([sys.executable, "-m", module, *arguments], cwd=REPO_ROOT, env=worker_env())


def field_options(kind: str) -> list[str]:
    if kind in ("unrolls", "sequences"):
        from bench.parts.shard_worker import transition_spec

        spec = transition_spec(kind)
        fields = [f"{name}:{','.join(map(str, f.shape))}:{f.dtype}" for name, f in spec.items()]
        return [option for field in fields for option in ("--field", field)]
    obs = "4:float32" if kind == "small" else "4,84,84:uint8"
    fields = [f"obs:{obs}", "action::int64", "reward::float32", "discount::float32"]
    fields.append(f"next_obs:{obs}")
    return [option for field in fields for option in ("--field", field)]


def start_shard(
    kind: str,
    capacity: int,
    index: int = 0,
    keys: str | None = None,
    extra: Sequence[str] = (),
    timeout_s: float = START_TIMEOUT_S,
) -> tuple[RoleProcess, dict]:
    """An ``apex replay`` of ``kind`` and ``capacity`` (``extra`` options added), and its
    ready payload (endpoints)."""
    frames = ["--frames"] if kind == "atari-frames" else []
    process = spawn(
        "launch",
        "replay",
        "--capacity",
        str(capacity),
        "--shard-index",
        str(index),
        "--seed",
        str(index),
        *field_options(kind),
        *frames,
        *(["--keys", keys] if keys else []),
        *extra,
    )
    return process, process.await_ready(timeout_s)


def start_pusher(
    mode: str,
    kind: str,
    sender: int,
    shards: list[dict],
    max_seconds: float,
    rate: float = 0.0,
    credit: bool = True,
    pack: bool = True,
    keys: str | None = None,
    batch: int = INSERT_BATCH,
):
    request = {
        "keys": keys,
        "rate": rate,
        "credit": credit,
        "pack": pack,
        "role": "push",
        "mode": mode,
        "kind": kind,
        "batch": batch,
        "sender": sender,
        "shards": [[s["insert"], s["request"]] for s in shards],
        "max_seconds": max_seconds,
    }
    return spawn("bench.parts.shard_worker", json.dumps(request))


def message_nbytes(kind: str) -> int:
    """Bytes on the wire of one insert message (of INSERT_BATCH transitions, about)."""
    from bench.parts.shard_worker import FrameSource, transition_spec
    from replay.frames.spec import FrameStackSpec
    from replay.wire.layout import encode

    if kind != "atari-frames":
        return INSERT_BATCH * (transition_spec(kind).item_nbytes + 8)  # + f64 priority
    # A steady-state message of a Pong pusher: new frames (LZ4) and its records.
    source = FrameSource(INSERT_BATCH, compress=True, seed=0)
    layout = FrameStackSpec.from_transition_spec(transition_spec("atari"))
    total = count = 0
    for _ in range(8):
        refs, scalars, priorities = source.next_records()
        insert = source.writer.build(0, refs, scalars, priorities)
        source.writer.sent_to(0, insert)
        frames = encode(insert.to_message(layout, 0, 0, 0))
        total += sum(f.nbytes if hasattr(f, "nbytes") else len(f) for f in frames)
        count += len(priorities)
    return int(total / count * INSERT_BATCH)


def measure_raw(kind: str, pushers: int, timing: dict, pack: bool = True) -> list[float]:
    request = {"role": "pull", "start_timeout_s": START_TIMEOUT_S, **timing}
    receiver = spawn("bench.parts.shard_worker", json.dumps(request))
    senders = []
    try:
        endpoint = receiver.await_ready(START_TIMEOUT_S)
        target = [{"insert": endpoint, "request": ""}]
        budget = (
            START_TIMEOUT_S + timing["warmup_s"] + timing["repeats"] * timing["seconds_per_repeat"]
        )
        senders = [
            start_pusher("raw", kind, 100 + i, target, budget, pack=pack) for i in range(pushers)
        ]
        rates = receiver.expect("rates", budget + 30)
    finally:
        stop_all([*senders, receiver])
    return [rate * INSERT_BATCH for rate in rates]


def measure_apex(
    kind: str,
    pushers: int,
    timing: dict,
    capacity: int,
    credit: bool = True,
    keys: str | None = None,
    shares: list[float] | None = None,
) -> list[float]:
    """Transitions/s into a real shard from ``pushers`` processes, one rate per timed
    window; ``shares`` (if given) gets each pusher's part of the transitions over all the
    windows, as a fraction of the mean part (1.0 each when none is starved)."""
    from replay.protocol.requests import RequestClient
    from replay.wire.security import SecurityConfig, make_context

    shard, ready = start_shard(kind, capacity, keys=keys)
    senders = []
    context = make_context(SecurityConfig(keys), need_server_secret=False)
    try:
        budget = (
            START_TIMEOUT_S + timing["warmup_s"] + timing["repeats"] * timing["seconds_per_repeat"]
        )
        senders = [
            start_pusher("apex", kind, 100 + i, [ready], budget, credit=credit, keys=keys)
            for i in range(pushers)
        ]
        client = RequestClient(context, ready["request"], sender=99, timeout_s=10.0)
        deadline = time.monotonic() + START_TIMEOUT_S
        while client.info()["transitions_added"] == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("no transition reached the shard")
            time.sleep(0.05)
        time.sleep(timing["warmup_s"])
        rates = []
        first = client.info()["senders"]
        for _ in range(timing["repeats"]):
            before, started = client.info()["transitions_added"], time.monotonic()
            time.sleep(timing["seconds_per_repeat"])
            after, ended = client.info()["transitions_added"], time.monotonic()
            rates.append((after - before) / (ended - started))
        last = client.info()
        rejected = last["rejected"]
        if shares is not None:
            parts = [
                counts["transitions"] - first.get(sender, {}).get("transitions", 0)
                for sender, counts in last["senders"].items()
                if sender != "99"
            ]
            mean = sum(parts) / max(1, len(parts))
            shares.extend(part / mean if mean else 0.0 for part in parts)
        client.close()
        if rejected:
            raise RuntimeError(f"the shard rejected messages from the pushers: {rejected}")
    finally:
        context.destroy(linger=0)
        stop_all([*senders, shard])
    return rates
