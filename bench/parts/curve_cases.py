"""The cost of CURVE (``replay.wire.security``) in ``apex bench shard --curve``: the same
ingest and sample-service figures with keys and without, in one run, and their ratios.

Ingest: one pusher process into one shard, for each transition kind (small, Atari whole,
Atari frames). Sample service: one shard, ready batches of 512 while an actor inserts.
Weights: versions per second the learner's PUB gets to 8 subscribers, lock-step (the
Nature CNN's 6.7 MB; the MLP's in quick runs).
CURVE encrypts and authenticates every frame (Curve25519 key exchange per connection,
then XSalsa20-Poly1305 per message), so its cost grows with the bytes moved: the Atari
kinds show it where it is largest.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.parts.sample_service import measure_sampling
from bench.parts.shard_processes import SAMPLE_BATCH, SAMPLE_PREFETCH, measure_apex
from bench.report import ok_record
from replay.wire.keys import generate

IMPLEMENTATIONS = ("apex", "apex-curve")
# Actors the weights fan-out figure publishes to (each gets its own encrypted copy).
FANOUT_SUBSCRIBERS = 8


def curve_cases(
    suite: str,
    timing: dict,
    kinds: Sequence[str],
    fill: int,
    ingest_rate: float,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Records and ratios (apex-curve / apex) of every CURVE case, for ``suite``."""
    records, ratios = [], []
    with tempfile.TemporaryDirectory(prefix="apex-bench-keys-") as directory:
        keys = str(Path(directory) / "keys")
        generate(Path(keys))
        cases = [
            (
                f"ingest-{kind}-1p-curve",
                "ingest",
                "transitions/s",
                lambda k=kind, key=None: measure_apex(
                    k, 1, timing, (1 << 16) if k != "atari" else (1 << 12), keys=key
                ),
                {"pushers": 1, "kind": kind},
            )
            for kind in kinds
        ]
        cases.append(
            (
                "sample-1shard-curve",
                "ready_batches",
                "batches/s",
                lambda key=None: measure_sampling(1, timing, fill, ingest_rate, keys=key)[0],
                {
                    "shards": 1,
                    "batch_size": SAMPLE_BATCH,
                    "prefetch": SAMPLE_PREFETCH,
                    "fill_per_shard": fill,
                    "ingest_rate": ingest_rate,
                },
            )
        )
        network = "mlp" if timing["seconds_per_repeat"] < 0.5 else "nature-cnn"
        cases.append(
            (
                f"weights-{network}-{FANOUT_SUBSCRIBERS}sub-curve",
                "weights_versions",
                "versions/s",
                lambda key=None: measure_fanout(
                    key, FANOUT_SUBSCRIBERS, timing["repeats"], network
                ),
                {"subscribers": FANOUT_SUBSCRIBERS, "network": network},
            )
        )
        for case, metric, unit, measure, params in cases:
            medians = {}
            for implementation in IMPLEMENTATIONS:
                if progress:
                    progress(f"shard {case} {implementation}")
                key = keys if implementation == "apex-curve" else None
                rates = measure(key=key)
                records.append(
                    ok_record(
                        suite,
                        case,
                        implementation,
                        metric,
                        unit,
                        rates,
                        {**params, "curve": key is not None},
                    )
                )
                medians[implementation] = float(np.median(rates))
            ratios.append(
                {
                    "suite": suite,
                    "case": case,
                    "metric": metric,
                    "numerator": "apex-curve",
                    "denominator": "apex",
                    "ratio": medians["apex-curve"] / medians["apex"],
                }
            )
    return records, ratios


def measure_fanout(
    keys: str | None, subscribers: int, repeats: int, network: str = "nature-cnn"
) -> list[float]:
    """Weights versions per second the learner's PUB delivers to ``subscribers`` actors,
    lock-step (each version reaches every subscriber before the next is published): with
    CURVE each subscriber's copy is encrypted on its own."""
    import torch

    from apex.algorithms.networks import build_network
    from apex.channels import ApexKind
    from apex.weights import WeightPublisher
    from replay.wire.layout import decode
    from replay.wire.security import SecurityConfig, make_context
    from replay.wire.transport import make_socket

    shape = (4, 84, 84) if network == "nature-cnn" else (4,)
    module = build_network(shape, 6, (256, 256))
    torch.set_num_threads(1)
    security = SecurityConfig(keys)
    learner = make_context(security)
    actors = [make_context(security, need_server_secret=False) for _ in range(subscribers)]
    try:
        publisher = WeightPublisher(learner, "127.0.0.1", 0)
        sockets = []
        for context in actors:
            socket = make_socket(context, 2, 1)  # zmq.SUB, high-water mark 1
            socket.subscribe(b"")
            socket.connect(publisher.endpoint)
            sockets.append(socket)
        rates, version = [], 0
        for repeat in range(repeats + 1):  # the first warms the connections up
            started = time.monotonic()
            for _ in range(5):
                version += 1
                waiting = set(range(subscribers))
                deadline = time.monotonic() + 30
                while waiting and time.monotonic() < deadline:
                    publisher.publish(module, version)
                    for index in list(waiting):
                        while sockets[index].poll(5):
                            frames = sockets[index].recv_multipart(copy=False)
                            if decode(frames, ApexKind).policy_version == version:
                                waiting.discard(index)
                                break
                if waiting:
                    raise TimeoutError(f"{len(waiting)} subscribers missed version {version}")
            if repeat:
                rates.append(5 / (time.monotonic() - started))
        for socket in sockets:
            socket.close(linger=0)
        publisher.close()
        return rates
    finally:
        for context in (learner, *actors):
            context.destroy(linger=0)
