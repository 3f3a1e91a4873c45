"""Repeat-and-summarise timing, shared by the suites and their worker processes.

Imports only the standard library, so a worker can run under a peer's own interpreter
(for example one whose torch matches torchrl's compiled extension).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Measurement:
    """Rates from repeated timed runs of one operation."""

    metric: str
    unit: str
    median: float
    min: float
    max: float
    repeats: int
    per_repeat_s: float

    def to_record(self) -> dict[str, object]:
        return asdict(self)


def measure_rate(
    metric: str,
    unit: str,
    operation: Callable[[], object],
    *,
    items_per_call: float = 1.0,
    repeats: int = 5,
    seconds_per_repeat: float = 0.4,
    warmup_calls: int = 20,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Times ``operation`` and reports ``items_per_call * calls / second``.

    After ``warmup_calls`` untimed calls, the number of calls per repeat is calibrated so
    one repeat lasts about ``seconds_per_repeat``; then ``repeats`` repeats are timed with
    ``clock`` (wall time; ``time.process_time`` gives rates per CPU core) and summarised
    by median, min and max.
    """
    for _ in range(warmup_calls):
        operation()
    calls = 1
    while True:
        started = clock()
        for _ in range(calls):
            operation()
        elapsed = clock() - started
        if elapsed >= seconds_per_repeat / 4 or calls >= 1 << 24:
            break
        calls *= 2
    calls = max(1, int(calls * seconds_per_repeat / max(elapsed, 1e-9)))
    rates = []
    for _ in range(repeats):
        started = clock()
        for _ in range(calls):
            operation()
        rates.append(items_per_call * calls / (clock() - started))
    return Measurement(
        metric=metric,
        unit=unit,
        median=statistics.median(rates),
        min=min(rates),
        max=max(rates),
        repeats=repeats,
        per_repeat_s=seconds_per_repeat,
    )
