"""Measures one prioritized-replay implementation on its cases, in a process of its own.

Run as ``python -m bench.parts.replay_worker '<json request>'``; prints one JSON object on its
last line of output: ``{"results": [...]}``, one entry per case of ``request["cases"]``,
each ``{"records": [...]}`` or ``{"error": ...}``. A full run sends one case per process,
so memory, JIT state and allocator fragmentation of one never touch the next; a quick run
sends all of an implementation's tiny cases to one process and pays its imports once.
A peer can run under an interpreter of its own. Imports only numpy and the
implementation measured.

Protocol for every implementation (α = 0.6, β = 0.4, as in the Ape-X paper):
    fill the store to capacity; then, on the full store,
    insert    batches of ``insert_batch`` transitions with priorities   (transitions/s)
    sample    ``batch_size`` transitions with importance weights          (batches/s)
    update    ``batch_size`` priorities of sampled items                  (calls/s)
    loop      sample + update, the learner's inner loop                   (iterations/s)
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable

import numpy as np

from bench.timing import measure_rate
from bench.workers import random_batch

ALPHA = 0.6
BETA = 0.4
FILL_BLOCK = 4096


def _fields(case: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    obs_shape = tuple(case["obs_shape"])
    obs_dtype = case["obs_dtype"]
    return {
        "obs": (obs_shape, obs_dtype),
        "action": ((), "int64"),
        "reward": ((), "float32"),
        "discount": ((), "float32"),
        "next_obs": (obs_shape, obs_dtype),
    }


class ApexAdapter:
    """This project's ``replay.PrioritizedReplay``; ``reuse_buffers`` picks whether samples
    are gathered into preallocated arrays (the shard's path) or fresh ones (as peers do)."""

    def __init__(self, fields: dict, capacity: int, batch_size: int, reuse_buffers: bool) -> None:
        from replay import PrioritizedReplay, TransitionSpec

        self.store = PrioritizedReplay(TransitionSpec.from_dict(fields), capacity, ALPHA, rng=0)
        self.buffers = self.store.allocate_batch(batch_size) if reuse_buffers else None
        self.batch_size = batch_size
        self.last = None

    def add(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        self.store.add(batch, priorities)

    def sample(self) -> None:
        self.last = self.store.sample(self.batch_size, BETA, out=self.buffers)

    def update(self, priorities: np.ndarray) -> None:
        self.store.update_priorities(self.last.indices, self.last.generations, priorities)


class CpprbAdapter:
    """cpprb's ``PrioritizedReplayBuffer`` (C++/Cython), the fastest peer we know."""

    def __init__(self, fields: dict, capacity: int, batch_size: int) -> None:
        from cpprb import PrioritizedReplayBuffer

        env_dict = {
            name: {"shape": shape or 1, "dtype": np.dtype(dtype)}
            for name, (shape, dtype) in fields.items()
        }
        self.buffer = PrioritizedReplayBuffer(capacity, env_dict, alpha=ALPHA)
        self.batch_size = batch_size
        self.last = None

    def add(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        self.buffer.add(**batch, priorities=priorities)

    def sample(self) -> None:
        self.last = self.buffer.sample(self.batch_size, beta=BETA)

    def update(self, priorities: np.ndarray) -> None:
        self.buffer.update_priorities(self.last["indexes"], priorities)


class TorchrlAdapter:
    """torchrl's ``PrioritizedReplayBuffer`` over a ``LazyTensorStorage`` (CPU tensors).
    torchrl has no insert-with-priorities call, so an insert is ``extend`` followed by
    ``update_priority`` on the returned indices."""

    def __init__(self, fields: dict, capacity: int, batch_size: int) -> None:
        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        self.torch = torch
        self.tensordict = TensorDict
        self.buffer = PrioritizedReplayBuffer(
            alpha=ALPHA, beta=BETA, storage=LazyTensorStorage(capacity), batch_size=batch_size
        )
        self.last_index = None

    def add(self, batch: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        count = len(priorities)
        data = self.tensordict(
            {name: self.torch.from_numpy(array) for name, array in batch.items()},
            batch_size=[count],
        )
        index = self.buffer.extend(data)
        self.buffer.update_priority(index, self.torch.as_tensor(priorities, dtype=self.torch.float))

    def sample(self) -> None:
        _, info = self.buffer.sample(return_info=True)
        self.last_index = info["index"]

    def update(self, priorities: np.ndarray) -> None:
        self.buffer.update_priority(
            self.last_index, self.torch.as_tensor(priorities, dtype=self.torch.float)
        )


def _make_adapter(implementation: str, fields: dict, capacity: int, batch_size: int):
    if implementation == "apex":
        return ApexAdapter(fields, capacity, batch_size, reuse_buffers=True)
    if implementation == "apex-fresh":
        return ApexAdapter(fields, capacity, batch_size, reuse_buffers=False)
    if implementation == "cpprb":
        return CpprbAdapter(fields, capacity, batch_size)
    if implementation == "torchrl":
        return TorchrlAdapter(fields, capacity, batch_size)
    raise ValueError(f"unknown implementation {implementation!r}")


def _fill(adapter, fields: dict, capacity: int, rng: np.random.Generator) -> None:
    block = random_batch(fields, min(FILL_BLOCK, capacity), rng)
    priorities = rng.uniform(0.01, 2.0, min(FILL_BLOCK, capacity))
    remaining = capacity
    while remaining > 0:
        count = min(remaining, len(priorities))
        adapter.add({k: v[:count] for k, v in block.items()}, priorities[:count])
        remaining -= count


def run(request: dict) -> dict:
    """Measures ``request["implementation"]`` on every case of ``request["cases"]``."""
    results = []
    for case in request["cases"]:
        try:
            results.append(run_case(request, case))
        except Exception as exc:  # reported to the parent as this case's failure
            results.append(
                {
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=5),
                }
            )
    return {"results": results}


def run_case(request: dict, case: dict) -> dict:
    """Measures ``request["implementation"]`` on ``case``; returns its records."""
    implementation = request["implementation"]
    capacity = int(case["capacity"])
    batch_size = int(request["batch_size"])
    insert_batch = int(request["insert_batch"])
    timing = {
        "repeats": int(request["repeats"]),
        "seconds_per_repeat": float(request["seconds_per_repeat"]),
    }
    fields = _fields(case)
    rng = np.random.default_rng(int(request.get("seed", 0)))
    adapter = _make_adapter(implementation, fields, capacity, batch_size)
    _fill(adapter, fields, capacity, rng)

    insert_data = random_batch(fields, insert_batch, rng)
    insert_priorities = rng.uniform(0.01, 2.0, insert_batch)
    new_priorities = [rng.uniform(0.01, 2.0, batch_size) for _ in range(16)]
    cycle = iter(range(1 << 62))

    def update() -> None:
        adapter.update(new_priorities[next(cycle) & 15])

    def loop() -> None:
        adapter.sample()
        update()

    adapter.sample()
    operations: list[tuple[str, str, Callable[[], object], float]] = [
        ("sample", "batches/s", adapter.sample, 1.0),
        ("update", "calls/s", update, 1.0),
        ("loop", "iterations/s", loop, 1.0),
        (
            "insert",
            "transitions/s",
            lambda: adapter.add(insert_data, insert_priorities),
            insert_batch,
        ),
    ]
    wanted = set(request.get("metrics") or [op[0] for op in operations])
    records = []
    for metric, unit, operation, items in operations:
        if metric not in wanted:
            continue
        measurement = measure_rate(metric, unit, operation, items_per_call=items, **timing)
        records.append(measurement.to_record())
    return {"records": records}


def main() -> None:
    print(json.dumps(run(json.loads(sys.argv[1]))))


if __name__ == "__main__":
    main()
