"""A batch's copy work split over a few threads.

Putting Pong stacks together is memory-bound copying (29 MB for a batch of 512), and one
core does not reach the memory's bandwidth: two threads gathered a batch 2.3× faster than
one on the 2-core machine of ``bench/RESULTS.md``. The kernels release the GIL (``nogil``),
so plain threads run them in parallel. The calling thread does the first part itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

# Items below which a part is not worth a thread hand-off (tens of microseconds).
MIN_PART = 32
_MAX_THREADS = 8
_pool: list[ThreadPoolExecutor] = []  # made on first use
_pool_lock = threading.Lock()


def default_threads() -> int:
    """Threads for one batch's copies: the cores this process may use, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _shared_pool() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(_MAX_THREADS - 1, thread_name_prefix="replay-parts"))
        return _pool[0]


def run_in_parts(count: int, part: Callable[[int, int], None], threads: int) -> None:
    """Calls ``part(start, stop)`` over ``[0, count)`` cut into up to ``threads`` parts of at
    least ``MIN_PART`` items, in parallel; returns when all are done (re-raising the
    first error)."""
    parts = max(1, min(threads, _MAX_THREADS, count // MIN_PART))
    if parts == 1:
        part(0, count)
        return
    bounds = [count * i // parts for i in range(parts + 1)]
    pool = _shared_pool()
    futures = [pool.submit(part, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    try:
        part(bounds[0], bounds[1])
    finally:
        for future in futures:
            future.result()
