"""Shard suite: ingest into one shard against raw pyzmq, and the learner's sample service.

Ingest. P pusher processes send batches of 50 transitions, either to a live shard through
``InsertClient`` ("apex"), the same without its credit-based flow control
("apex-no-credit", ``credit=None``: only high-water marks and kernel buffers bound
what is in flight), or as the same pre-encoded frames to a bare PULL socket that only
receives ("raw-pyzmq"). The baseline is therefore what the transport alone moves with our
framing on this machine, in the same run. A second baseline sends the same arrays one
frame each, as a plain pyzmq program would ("raw-pyzmq-per-array"; small messages travel
packed in one frame in our wire format, see ``replay.wire.layout``).
The credit costs peak ingest of small
transitions (the shard drains fewer batches per loop round) and buys a bound on stale data
in flight. The shard's rate is read from its INFO counters
over timed windows; the baseline counts what it received in its own windows. The
implementations take turns, one window each per round, and a ratio is the median of the
rounds' ratios (``per_round`` beside it), so a VM whose speed changes between minutes
moves both sides of a ratio alike.

IMPALA's queue (``queue-unrolls-1shard``): one pusher's unrolls through a queue shard
to the learner's sampler, each handed out once (``bench.parts.queue_service``).

Sample service. S shards hold 2^16 small transitions each while one actor process keeps
inserting into all of them. The learner's sampler (``replay.sampling.sampler``, prefetch 8) delivers
batches of 512 as ready tensors, and this process counts them per second. Ingestion is
paced at a stated rate (100K transitions/s by default), since an unpaced pusher on this
2-core machine would measure CPU contention, not the service.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from bench.parts.shard_processes import (
    INSERT_BATCH,
    SAMPLE_BATCH,
    SAMPLE_PREFETCH,
    measure_apex,
    measure_raw,
    message_nbytes,
)
from bench.report import missing_env, ok_record, unavailable_record

SUITE = "shard"
# Ingestion during the sample-service figure: twice the whole 360-actor fleet of the
# Ape-X paper (about 50K transitions/s). 0 means as fast as one actor process can push.
DEFAULT_INGEST_RATE = 100_000.0
# The frame shard's sample service: a store of 20K Pong transitions, and a fleet that
# makes 5K transitions/s (about 20 Pong actors of 4 envs on this machine's speed).
ATARI_SAMPLE_FILL = 20_000
ATARI_SAMPLE_INGEST_RATE = 5_000.0
PARTS = ("ingest", "sample", "queue", "sequences")


def _record(
    case: str, implementation: str, metric: str, unit: str, rates: list[float], params: dict
) -> dict:
    return ok_record(SUITE, case, implementation, metric, unit, rates, params)


def _ingest_rounds(
    kind: str,
    pushers: int,
    timing: dict,
    capacity: int,
    shares: list[float],
    case: str,
    progress: Callable[[str], None] | None,
) -> dict[str, list[float]]:
    """Transitions/s of each implementation, one timed window per round, the
    implementations taking turns within each round (their order rotated from round to
    round). A ratio is then taken within a round, between windows seconds apart: this VM's
    speed has been seen to step 2x for seconds at a time, and measuring each implementation
    for all its windows before the next made single ratios swing as much."""
    implementations = {
        "apex": lambda t: measure_apex(kind, pushers, t, capacity, shares=shares),
        "apex-no-credit": lambda t: measure_apex(kind, pushers, t, capacity, False),
    }
    if kind != "atari-frames":  # raw pyzmq moves prebuilt messages; frame messages differ
        implementations["raw-pyzmq"] = lambda t: measure_raw(kind, pushers, t)
        implementations["raw-pyzmq-per-array"] = lambda t: measure_raw(kind, pushers, t, False)
    names = list(implementations)
    rates: dict[str, list[float]] = {name: [] for name in names}
    one_window = {**timing, "repeats": 1}
    for round_index in range(timing["repeats"]):
        turn = round_index % len(names)
        for name in names[turn:] + names[:turn]:
            if progress:
                progress(f"shard {case} {name} (round {round_index + 1})")
            rates[name] += implementations[name](one_window)
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
    parts: Sequence[str] = PARTS,
) -> dict[str, object]:
    """Runs the suite's ``parts`` (``PARTS``: ingest by kind, the sample service, IMPALA's
    queue, R2D2's sequences) and returns ``{"records": [...], "ratios": [...],
    "config": {...}}``."""
    from bench.parts.sample_service import measure_sampling

    timing = {
        "repeats": repeats,
        "seconds_per_repeat": seconds_per_repeat or (0.2 if quick else 1.0),
        "warmup_s": 0.2 if quick else 1.0,
    }
    pusher_counts = tuple(pusher_counts or ((1,) if quick else (1, 2, 4)))
    records, ratios = [], []
    for kind in kinds if "ingest" in parts else ():
        missing = missing_env("Pong") if kind == "atari-frames" else None  # real Pong frames
        if missing:
            records += [
                unavailable_record(SUITE, f"ingest-{kind}-{pushers}p", implementation, missing)
                for pushers in pusher_counts
                for implementation in ("apex", "apex-no-credit")
            ]
            continue
        nbytes = message_nbytes(kind) / INSERT_BATCH
        capacity = (1 << 16) if kind in ("small", "atari-frames") else (1 << 12)
        for pushers in pusher_counts:
            case = f"ingest-{kind}-{pushers}p"
            params = {
                "pushers": pushers,
                "batch": INSERT_BATCH,
                "transition_nbytes": nbytes,
                "rounds": timing["repeats"],
            }
            shares: list[float] = []
            rates = _ingest_rounds(kind, pushers, timing, capacity, shares, case, progress)
            for implementation, values in rates.items():
                records.append(
                    _record(case, implementation, "ingest", "transitions/s", values, params)
                )
                megabytes = [rate * nbytes / 1e6 for rate in values]
                records.append(
                    _record(case, implementation, "ingest_bandwidth", "MB/s", megabytes, params)
                )
            if pushers > 1:
                # Each pusher's part of what the shard took, of the mean part: the least is
                # the most starved sender (1.0: none is).
                records.append(_record(case, "apex", "sender_share", "of the mean", shares, params))
            for baseline in ("raw-pyzmq", "raw-pyzmq-per-array"):
                if baseline in rates:
                    per_round = [a / b for a, b in zip(rates["apex"], rates[baseline], strict=True)]
                    ratios.append(
                        {
                            "suite": SUITE,
                            "case": case,
                            "metric": "ingest",
                            "numerator": "apex",
                            "denominator": baseline,
                            "ratio": float(np.median(per_round)),
                            "per_round": per_round,
                        }
                    )
    fill = (1 << 12) if quick else (1 << 16)
    for shard_count in shard_counts if "sample" in parts else ():
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
    if "sample" in parts and "atari-frames" in kinds and not quick:
        # Pong stacks of 512 put together by a frame shard (LZ4) while a Pong pusher inserts.
        case, rate = "sample-atari-frames-1shard", ATARI_SAMPLE_INGEST_RATE
        if progress:
            progress(f"shard {case} apex")
        params = {
            "shards": 1,
            "batch_size": SAMPLE_BATCH,
            "prefetch": SAMPLE_PREFETCH,
            "fill_per_shard": ATARI_SAMPLE_FILL,
            "ingest_rate": rate,
        }
        batches, ingest = measure_sampling(1, timing, ATARI_SAMPLE_FILL, rate, "atari-frames")
        records.append(_record(case, "apex", "ready_batches", "batches/s", batches, params))
        records.append(
            _record(case, "apex", "ingest_while_sampling", "transitions/s", ingest, params)
        )
    if "queue" in parts:
        # IMPALA's path: unrolls through a queue shard to the learner's sampler.
        from bench.parts.queue_service import (
            QUEUE_CAPACITY,
            UNROLL_BATCH,
            UNROLLS_PER_MESSAGE,
            measure_queue,
        )

        case = "queue-unrolls-1shard"
        if progress:
            progress(f"shard {case} apex")
        params = {
            "shards": 1,
            "batch_size": UNROLL_BATCH,
            "unrolls_per_message": UNROLLS_PER_MESSAGE,
            "capacity": QUEUE_CAPACITY,
            "unroll_length": 20,
        }
        batches, unrolls = measure_queue(timing)
        records.append(_record(case, "apex", "ready_batches", "batches/s", batches, params))
        records.append(_record(case, "apex", "unrolls", "unrolls/s", unrolls, params))
    if "sequences" in parts:  # R2D2's (bench.parts.sequence_cases)
        from bench.parts.sequence_cases import sequence_records

        records += sequence_records(SUITE, quick, timing, progress)
    if curve:  # the same figures with CURVE keys beside without (bench.parts.curve_cases)
        from bench.parts.curve_cases import curve_cases

        more_records, more_ratios = curve_cases(SUITE, timing, kinds, fill, ingest_rate, progress)
        records += more_records
        ratios += more_ratios
    return {
        "records": records,
        "ratios": ratios,
        "config": {
            **timing,
            "curve": curve,
            "parts": list(parts),
            "pusher_counts": list(pusher_counts),
            "kinds": list(kinds),
            "shard_counts": list(shard_counts),
        },
    }
