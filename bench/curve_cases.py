"""The cost of CURVE (``replay.security``) in ``apex bench shard --curve``: the same
ingest and sample-service figures with keys and without, in one run, and their ratios.

Ingest: one pusher process into one shard, for each transition kind (small, Atari whole,
Atari frames). Sample service: one shard, ready batches of 512 while an actor inserts.
CURVE encrypts and authenticates every frame (Curve25519 key exchange per connection,
then XSalsa20-Poly1305 per message), so its cost grows with the bytes moved: the Atari
kinds show it where it is largest.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.report import ok_record
from bench.sample_service import measure_sampling
from bench.shard_suite import SAMPLE_BATCH, SAMPLE_PREFETCH, SUITE, measure_apex
from replay.keys import generate

IMPLEMENTATIONS = ("apex", "apex-curve")


def curve_cases(
    timing: dict,
    kinds: Sequence[str],
    fill: int,
    ingest_rate: float,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Records and ratios (apex-curve / apex) of every CURVE case."""
    records, ratios = [], []
    with tempfile.TemporaryDirectory(prefix="apex-bench-keys-") as directory:
        keys = str(Path(directory) / "keys")
        generate(Path(keys))
        cases = [
            (f"ingest-{kind}-1p-curve", "ingest", "transitions/s",
             lambda k=kind, key=None: measure_apex(
                 k, 1, timing, (1 << 16) if k != "atari" else (1 << 12), keys=key),
             {"pushers": 1, "kind": kind})
            for kind in kinds
        ]  # fmt: skip
        cases.append(
            ("sample-1shard-curve", "ready_batches", "batches/s",
             lambda key=None: measure_sampling(1, timing, fill, ingest_rate, keys=key)[0],
             {"shards": 1, "batch_size": SAMPLE_BATCH, "prefetch": SAMPLE_PREFETCH,
              "fill_per_shard": fill, "ingest_rate": ingest_rate})
        )  # fmt: skip
        for case, metric, unit, measure, params in cases:
            medians = {}
            for implementation in IMPLEMENTATIONS:
                if progress:
                    progress(f"shard {case} {implementation}")
                key = keys if implementation == "apex-curve" else None
                rates = measure(key=key)
                records.append(ok_record(SUITE, case, implementation, metric, unit, rates,
                                         {**params, "curve": key is not None}))  # fmt: skip
                medians[implementation] = float(np.median(rates))
            ratios.append({"suite": SUITE, "case": case, "metric": metric,
                           "numerator": "apex-curve", "denominator": "apex",
                           "ratio": medians["apex-curve"] / medians["apex"]})  # fmt: skip
    return records, ratios
