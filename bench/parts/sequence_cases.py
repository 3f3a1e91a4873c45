"""R2D2's sequences in replay (``apex bench shard``): one item of a shard's sum-tree is one
sequence of 80 steps with its two stored LSTM states (``bench.parts.shard_worker.sequence_spec``).

* ``store-sequences``: one store holding ``stored_steps`` steps (sequences x 80; 10M in a
  full run), filled in a process of its own. Milliseconds per batch of 64 sequences sampled
  by priority and gathered into preallocated arrays (the shard's path), the same with their
  priorities written back, and the process's RSS once filled, per million stored steps.
  TorchRL's users report 1.65 s per sequence batch from 346M stored transitions
  (pytorch/rl issue 2669); this is the figure to set beside it.
* ``sample-sequences-1shard``: ready batches of 64 x 80 from one ``apex replay`` process
  through the learner's sampler while an actor process inserts sequences, as
  ``sample-Nshard`` does for transitions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

from bench.report import ok_record, unavailable_record
from bench.workers import REPO_ROOT, worker_env

SEQUENCE_BATCH = 64
# R2D2's actors: 256 of them made about 260 sequences of 80 a second (period 40, at the
# paper's ~21K env steps/s); twice that inserts while the shard serves batches.
SEQUENCE_INGEST_RATE = 500.0
FULL_STORED_STEPS = 10_000_000
QUICK_STORED_STEPS = 80_000
ALPHA, BETA = 0.6, 0.4


def _fixed(suite: str, case: str, metric: str, unit: str, value: float, params: dict) -> dict:
    return ok_record(suite, case, "apex", metric, unit, [value], params)


def store_records(suite: str, stored_steps: int, timing: dict) -> list[dict]:
    """The ``store-sequences`` records, measured in a fresh process."""
    request = {"stored_steps": stored_steps, **timing}
    command = [sys.executable, "-m", "bench.parts.sequence_cases", json.dumps(request)]
    completed = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    case = "store-sequences"
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        return [unavailable_record(suite, case, "apex", tail)]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    keys = (
        "stored_steps",
        "sequences",
        "sequence_length",
        "batch_size",
        "item_nbytes",
        "store_nbytes",
        "fill_s",
    )
    params = {key: result[key] for key in keys}
    per_million = result["rss_bytes"] / (result["stored_steps"] / 1e6)
    timed = [
        ("sample_time", result["sample_ms"]),
        ("sample_and_update_time", result["sample_and_update_ms"]),
    ]
    return [
        *(
            ok_record(suite, case, "apex", metric, "ms/batch", values, params)
            for metric, values in timed
        ),
        _fixed(suite, case, "rss", "bytes", result["rss_bytes"], params),
        _fixed(suite, case, "rss_per_million_steps", "bytes", per_million, params),
    ]


def sampler_records(suite: str, timing: dict, sequences: int) -> list[dict]:
    """The ``sample-sequences-1shard`` records: one shard of ``sequences`` sequences."""
    from bench.parts.sample_service import measure_sampling
    from bench.parts.shard_processes import SAMPLE_PREFETCH

    params = {
        "shards": 1,
        "batch_size": SEQUENCE_BATCH,
        "prefetch": SAMPLE_PREFETCH,
        "fill_per_shard": sequences,
        "ingest_rate": SEQUENCE_INGEST_RATE,
    }
    batches, ingest = measure_sampling(
        1, timing, sequences, SEQUENCE_INGEST_RATE, "sequences", batch_size=SEQUENCE_BATCH
    )
    case = "sample-sequences-1shard"
    return [
        ok_record(suite, case, "apex", "ready_batches", "batches/s", batches, params),
        ok_record(suite, case, "apex", "ingest_while_sampling", "sequences/s", ingest, params),
    ]


def sequence_records(
    suite: str, quick: bool, timing: dict, progress: Callable[[str], None] | None = None
) -> list[dict]:
    """Both cases; a full run stores 10M steps, a quick one 80K."""
    from bench.parts.shard_worker import sequence_spec

    stored_steps = QUICK_STORED_STEPS if quick else FULL_STORED_STEPS
    length = sequence_spec()["action"].shape[0]
    if progress:
        progress(f"shard store-sequences apex ({stored_steps:,} steps)")
    records = store_records(suite, stored_steps, timing)
    if progress:
        progress("shard sample-sequences-1shard apex")
    return records + sampler_records(suite, timing, stored_steps // length)


def _milliseconds_per_call(
    operation: Callable[[], object], repeats: int, seconds_per_repeat: float
) -> list[float]:
    """Mean milliseconds per call of ``operation`` in each of ``repeats`` windows."""
    for _ in range(5):
        operation()
    times = []
    for _ in range(repeats):
        calls, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds_per_repeat:
            operation()
            calls += 1
        times.append(1e3 * elapsed / calls)
    return times


def _measure(request: dict) -> dict:
    """Fills one store with ``stored_steps`` steps of sequences, then times batches."""
    from bench.parts.shard_worker import make_batch, sequence_spec
    from replay import PrioritizedReplay
    from replay.store.storage import RingStorage
    from replay.store.sum_tree import SumTree

    spec = sequence_spec()
    length = spec["action"].shape[0]
    sequences = request["stored_steps"] // length
    store = PrioritizedReplay(spec, sequences, ALPHA, rng=0)
    rows = max(1, (4 << 20) // spec.item_nbytes)
    block = make_batch(spec, rows, 0)
    rng = np.random.default_rng(0)
    began = time.monotonic()
    for start in range(0, sequences, rows):
        count = min(rows, sequences - start)
        store.add(
            {name: items[:count] for name, items in block.items()}, rng.uniform(0.1, 2.0, count)
        )
    fill_s = time.monotonic() - began
    buffers = store.allocate_batch(SEQUENCE_BATCH)
    timing = {"repeats": request["repeats"], "seconds_per_repeat": request["seconds_per_repeat"]}

    def sample():
        return store.sample(SEQUENCE_BATCH, BETA, out=buffers)

    def sample_and_update():
        batch = sample()
        store.update_priorities(
            batch.indices, batch.generations, rng.uniform(0.1, 2.0, SEQUENCE_BATCH)
        )

    sample_ms = _milliseconds_per_call(sample, **timing)
    sample_and_update_ms = _milliseconds_per_call(sample_and_update, **timing)
    store_nbytes = RingStorage.planned_nbytes(spec, sequences) + SumTree.planned_nbytes(sequences)
    status = open("/proc/self/status", encoding="utf-8").read()  # noqa: SIM115
    rss_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
    return {
        "stored_steps": sequences * length,
        "sequences": sequences,
        "sequence_length": length,
        "batch_size": SEQUENCE_BATCH,
        "item_nbytes": spec.item_nbytes,
        "fill_s": fill_s,
        "sample_ms": sample_ms,
        "sample_and_update_ms": sample_and_update_ms,
        "rss_bytes": rss_kib * 1024,
        "store_nbytes": store_nbytes,
    }


if __name__ == "__main__":
    print(json.dumps(_measure(json.loads(sys.argv[1]))))
