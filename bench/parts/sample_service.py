"""The learner's sample service, measured: S shards filled, one actor process inserting at
a stated rate, and the learner's sampler delivering ready batches (see ``bench.parts.shard_suite``,
whose helpers start the processes)."""

from __future__ import annotations

import time

import numpy as np

from bench.parts.shard_processes import (
    INSERT_BATCH,
    SAMPLE_BATCH,
    SAMPLE_PREFETCH,
    START_TIMEOUT_S,
    start_pusher,
    start_shard,
)
from launch.supervision.role_process import stop_all

INFO_TIMEOUT_S = 30.0
# The most one fill message carries: an R2D2 sequence is 11 KB, 4,096 of them 45 MB.
FILL_MESSAGE_BYTES = 4 << 20


def fill_shards(kind: str, context, endpoints, spec, transitions: int) -> None:
    """Puts ``transitions`` into the shards, as an actor would (frames for frame shards)."""
    from bench.parts.shard_worker import FrameSource, make_batch
    from replay.inserts.client import InsertClient

    filler = InsertClient(context, endpoints, sender=98, spec=spec, timeout_s=30.0)
    if kind == "atari-frames":
        source = FrameSource(INSERT_BATCH, filler.frame_layout["compressed"], seed=98)
        sent = 0
        while sent < transitions:
            shard, insert = filler.insert_frames(
                source.next_builder(),
                stretch=1,  # spread the fill evenly over the shards
            )
            source.writer.sent_to(shard, insert)
            sent += len(insert.priorities)
    else:
        rows = max(1, min(4096, FILL_MESSAGE_BYTES // spec.item_nbytes))
        block = make_batch(spec, rows, 0)
        for _ in range(transitions // rows):
            filler.insert(block, np.ones(rows))
        rest = transitions % rows
        if rest:
            filler.insert({name: items[:rest] for name, items in block.items()}, np.ones(rest))
    filler.close()


def measure_sampling(
    shard_count: int,
    timing: dict,
    fill: int,
    ingest_rate: float,
    kind: str = "small",
    keys: str | None = None,
    batch_size: int = SAMPLE_BATCH,
) -> tuple[list[float], list[float]]:
    from apex.learning.staging import DeviceStager
    from bench.parts.shard_worker import transition_spec
    from replay.inserts.endpoints import ShardEndpoints
    from replay.protocol.requests import RequestClient
    from replay.sampling.pump import SamplerConfig
    from replay.sampling.sampler import make_sampler
    from replay.wire.security import SecurityConfig, make_context

    spec = transition_spec("atari" if kind == "atari-frames" else kind)
    started = [start_shard(kind, 2 * fill, index, keys) for index in range(shard_count)]
    shards = [process for process, _ in started]
    readies = [ready for _, ready in started]
    security = SecurityConfig(keys)
    context = make_context(security, need_server_secret=False)
    processes = list(shards)
    try:
        endpoints = [ShardEndpoints(r["insert"], r["request"]) for r in readies]
        fill_shards(kind, context, endpoints, spec, fill * shard_count)
        # A shard busy filling or serving samples on a loaded machine (the suite's two
        # workers beside a Slurm job) has taken over 5 s, the default, to answer INFO.
        clients = [
            RequestClient(context, r["request"], sender=97, timeout_s=INFO_TIMEOUT_S)
            for r in readies
        ]
        deadline = time.monotonic() + START_TIMEOUT_S
        while sum(c.info()["size"] for c in clients) < fill * shard_count * 0.95:
            if time.monotonic() > deadline:
                raise TimeoutError("shards were not filled in time")
            time.sleep(0.05)
        budget = (
            START_TIMEOUT_S
            + timing["warmup_s"]
            + timing["repeats"] * timing["seconds_per_repeat"]
            + 30
        )
        processes.append(
            start_pusher("apex", kind, 1, readies, budget, rate=ingest_rate, keys=keys)
        )
        filled = sum(c.info()["transitions_added"] for c in clients)
        while sum(c.info()["transitions_added"] for c in clients) == filled:
            if time.monotonic() > deadline + START_TIMEOUT_S:
                raise TimeoutError("the actor process never started inserting")
            time.sleep(0.05)
        config = SamplerConfig(
            endpoints=tuple(r["request"] for r in readies),
            batch_size=batch_size,
            prefetch=SAMPLE_PREFETCH,
            sender=96,
            security=security,
        )
        # Batches as the learner takes them: torch tensors (on the CPU here).
        with make_sampler(config, spec, DeviceStager("cpu")) as sampler:
            batch_rates, ingest_rates = sampled_windows(
                sampler, lambda: sum(c.info()["transitions_added"] for c in clients), timing
            )
        for client in clients:
            client.close()
    finally:
        context.destroy(linger=0)
        stop_all(processes)
    return batch_rates, ingest_rates


def sampled_windows(sampler, added, timing: dict) -> tuple[list[float], list[float]]:
    """After a warm-up, per timed window: the sampler's batches per second, and the
    shards' ``added()`` (items taken in, in all) per second."""
    warm_end = time.monotonic() + timing["warmup_s"]
    while time.monotonic() < warm_end:
        sampler.next_batch()
    batch_rates, ingest_rates = [], []
    for _ in range(timing["repeats"]):
        added_before = added()
        count, begun = 0, time.monotonic()
        window_end = begun + timing["seconds_per_repeat"]
        while time.monotonic() < window_end:
            sampler.next_batch()
            count += 1
        elapsed = time.monotonic() - begun
        batch_rates.append(count / elapsed)
        ingest_rates.append((added() - added_before) / elapsed)
    return batch_rates, ingest_rates
