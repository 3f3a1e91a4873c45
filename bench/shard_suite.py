"""Shard suite: ingest into one shard against raw pyzmq, and the learner's sample service.

Ingest. P pusher processes send batches of 50 transitions, either to a live shard through
``InsertClient`` ("apex"), the same without its credit-based flow control
("apex-no-credit", ``credit=None``: only high-water marks and kernel buffers bound
what is in flight), or as the same pre-encoded frames to a bare PULL socket that only
receives ("raw-pyzmq"). The baseline is therefore what the transport alone moves with our
framing on this machine, in the same run. A second baseline sends the same arrays one
frame each, as a plain pyzmq program would ("raw-pyzmq-per-array"; small messages travel
packed in one frame in our wire format, see ``replay.wire``). The credit costs peak ingest of small
transitions (the shard drains fewer batches per loop round) and buys a bound on stale data
in flight. The shard's rate is read from its INFO counters
over timed windows; the baseline counts what it received in its own windows.

Sample service. S shards hold 2^16 small transitions each while one actor process keeps
inserting into all of them. The learner's sampler (``replay.sampler_drivers``, prefetch 8) delivers
batches of 512 as ready tensors, and this process counts them per second. Ingestion is
paced at a stated rate (100K transitions/s by default), since an unpaced pusher on this
2-core machine would measure CPU contention, not the service.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench.report import missing_env, ok_record, unavailable_record
from bench.workers import REPO_ROOT, worker_env
from launch.role_process import RoleProcess, stop_all

SUITE = "shard"
INSERT_BATCH = 50
START_TIMEOUT_S = 60.0
SAMPLE_BATCH = 512
SAMPLE_PREFETCH = 8
# Ingestion during the sample-service figure: twice the whole 360-actor fleet of the
# Ape-X paper (about 50K transitions/s). 0 means as fast as one actor process can push.
DEFAULT_INGEST_RATE = 100_000.0
# The frame shard's sample service: a store of 20K Pong transitions, and a fleet that
# makes 5K transitions/s (about 20 Pong actors of 4 envs on this machine's speed).
ATARI_SAMPLE_FILL = 20_000
ATARI_SAMPLE_INGEST_RATE = 5_000.0


def spawn(module: str, *arguments: str) -> RoleProcess:
    """``python -m MODULE ARGUMENTS`` from the repository, its log in a temporary file."""
    return RoleProcess([sys.executable, "-m", module, *arguments], cwd=REPO_ROOT,
                       env=worker_env())  # fmt: skip


def _field_options(kind: str) -> list[str]:
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
        "launch", "replay", "--capacity", str(capacity), "--shard-index", str(index),
        "--seed", str(index), *_field_options(kind), *frames, *(["--keys", keys] if keys else []),
        *extra,
    )  # fmt: skip
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
):
    request = {
        "keys": keys,
        "rate": rate,
        "credit": credit,
        "pack": pack,
        "role": "push",
        "mode": mode,
        "kind": kind,
        "batch": INSERT_BATCH,
        "sender": sender,
        "shards": [[s["insert"], s["request"]] for s in shards],
        "max_seconds": max_seconds,
    }
    return spawn("bench.shard_worker", json.dumps(request))


def _message_nbytes(kind: str) -> int:
    """Bytes on the wire of one insert message (of INSERT_BATCH transitions, about)."""
    from bench.shard_worker import FrameSource, transition_spec
    from replay.frame_spec import FrameStackSpec
    from replay.wire import encode

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


def _record(
    case: str, implementation: str, metric: str, unit: str, rates: list[float], params: dict
) -> dict:
    return ok_record(SUITE, case, implementation, metric, unit, rates, params)


def _measure_raw(kind: str, pushers: int, timing: dict, pack: bool = True) -> list[float]:
    request = {"role": "pull", "start_timeout_s": START_TIMEOUT_S, **timing}
    receiver = spawn("bench.shard_worker", json.dumps(request))
    senders = []
    try:
        endpoint = receiver.await_ready(START_TIMEOUT_S)
        target = [{"insert": endpoint, "request": ""}]
        budget = (
            START_TIMEOUT_S + timing["warmup_s"] + timing["repeats"] * timing["seconds_per_repeat"]
        )
        senders = [start_pusher("raw", kind, 100 + i, target, budget, pack=pack)
                   for i in range(pushers)]  # fmt: skip
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
) -> list[float]:
    from replay.requests import RequestClient
    from replay.security import SecurityConfig, make_context

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
        for _ in range(timing["repeats"]):
            before, started = client.info()["transitions_added"], time.monotonic()
            time.sleep(timing["seconds_per_repeat"])
            after, ended = client.info()["transitions_added"], time.monotonic()
            rates.append((after - before) / (ended - started))
        rejected = client.info()["rejected"]
        client.close()
        if rejected:
            raise RuntimeError(f"the shard rejected messages from the pushers: {rejected}")
    finally:
        context.destroy(linger=0)
        stop_all([*senders, shard])
    return rates


def run(
    *,
    quick: bool = False,
    repeats: int = 5,
    seconds_per_repeat: float | None = None,
    pusher_counts: Sequence[int] | None = None,
    kinds: Sequence[str] = ("small", "atari", "atari-frames"),
    shard_counts: Sequence[int] = (1, 2),
    ingest_rate: float = DEFAULT_INGEST_RATE,
    progress: Callable[[str], None] | None = None,
    curve: bool = False,
) -> dict[str, object]:
    """Runs the suite and returns ``{"records": [...], "ratios": [...], "config": {...}}``."""
    from bench.sample_service import measure_sampling  # it builds on this module's helpers

    timing = {
        "repeats": repeats,
        "seconds_per_repeat": seconds_per_repeat or (0.2 if quick else 1.0),
        "warmup_s": 0.2 if quick else 1.0,
    }
    pusher_counts = tuple(pusher_counts or ((1,) if quick else (1, 2, 4)))
    records, ratios = [], []
    for kind in kinds:
        missing = missing_env("Pong") if kind == "atari-frames" else None  # real Pong frames
        if missing:
            records += [unavailable_record(SUITE, f"ingest-{kind}-{pushers}p", implementation,
                                           missing)
                        for pushers in pusher_counts
                        for implementation in ("apex", "apex-no-credit")]  # fmt: skip
            continue
        nbytes = _message_nbytes(kind) / INSERT_BATCH
        capacity = (1 << 16) if kind in ("small", "atari-frames") else (1 << 12)
        for pushers in pusher_counts:
            case = f"ingest-{kind}-{pushers}p"
            params = {"pushers": pushers, "batch": INSERT_BATCH, "transition_nbytes": nbytes}
            medians = {}
            for implementation, measure in (
                # Raw pyzmq moves prebuilt messages; frame messages differ each time.
                *(
                    [
                        ("raw-pyzmq", lambda k=kind, p=pushers: _measure_raw(k, p, timing)),
                        (
                            "raw-pyzmq-per-array",
                            lambda k=kind, p=pushers: _measure_raw(k, p, timing, pack=False),
                        ),
                    ]
                    if kind != "atari-frames"
                    else []
                ),
                ("apex", lambda k=kind, p=pushers, c=capacity: measure_apex(k, p, timing, c)),
                (
                    "apex-no-credit",
                    lambda k=kind, p=pushers, c=capacity: measure_apex(k, p, timing, c, False),
                ),
            ):
                if progress:
                    progress(f"shard {case} {implementation}")
                rates = measure()
                records.append(
                    _record(case, implementation, "ingest", "transitions/s", rates, params)
                )
                megabytes = [rate * nbytes / 1e6 for rate in rates]
                records.append(
                    _record(case, implementation, "ingest_bandwidth", "MB/s", megabytes, params)
                )
                medians[implementation] = float(np.median(rates))
            for baseline in ("raw-pyzmq", "raw-pyzmq-per-array"):
                if baseline in medians:
                    ratios.append(
                        {
                            "suite": SUITE, "case": case, "metric": "ingest",
                            "numerator": "apex", "denominator": baseline,
                            "ratio": medians["apex"] / medians[baseline],
                        }
                    )  # fmt: skip
    fill = (1 << 12) if quick else (1 << 16)
    for shard_count in shard_counts:
        case = f"sample-{shard_count}shard"
        if progress:
            progress(f"shard {case} apex")
        params = {
            "shards": shard_count,
            "batch_size": SAMPLE_BATCH,
            "prefetch": SAMPLE_PREFETCH,
            "fill_per_shard": fill,
        }
        batches, ingest = measure_sampling(shard_count, timing, fill, ingest_rate)
        records.append(_record(case, "apex", "ready_batches", "batches/s", batches, params))
        records.append(
            _record(case, "apex", "ingest_while_sampling", "transitions/s", ingest, params)
        )
    if "atari-frames" in kinds and not quick:
        # Pong stacks of 512 put together by a frame shard (LZ4) while a Pong pusher inserts.
        case, rate = "sample-atari-frames-1shard", ATARI_SAMPLE_INGEST_RATE
        if progress:
            progress(f"shard {case} apex")
        params = {"shards": 1, "batch_size": SAMPLE_BATCH, "prefetch": SAMPLE_PREFETCH,
                  "fill_per_shard": ATARI_SAMPLE_FILL, "ingest_rate": rate}  # fmt: skip
        batches, ingest = measure_sampling(1, timing, ATARI_SAMPLE_FILL, rate, "atari-frames")
        records.append(_record(case, "apex", "ready_batches", "batches/s", batches, params))
        records.append(
            _record(case, "apex", "ingest_while_sampling", "transitions/s", ingest, params)
        )
    if curve:  # the same figures with CURVE keys beside without (bench.curve_cases)
        from bench.curve_cases import curve_cases

        more_records, more_ratios = curve_cases(timing, kinds, fill, ingest_rate, progress)
        records += more_records
        ratios += more_ratios
    return {
        "records": records,
        "ratios": ratios,
        "config": {
            **timing,
            "curve": curve,
            "pusher_counts": list(pusher_counts),
            "kinds": list(kinds),
            "shard_counts": list(shard_counts),
        },
    }
