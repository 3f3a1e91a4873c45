"""Samples-per-insert limiter: refused settings, no deadlock, bounded ratio, and on a live shard."""

from __future__ import annotations

import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import ReplayTimeout
from replay.inserts.client import InsertClient
from replay.protocol.requests import RequestClient
from replay.server.rate_limiter import RateLimiter
from tests.conftest import SMALL_SPEC, ShardProcess, make_batch, wait_for


@pytest.mark.parametrize(
    ("min_size", "spi", "buffer", "capacity", "pattern"),
    [
        (0, None, 0.0, 10, "min_size=0"),
        (11, None, 0.0, 10, "capacity=10"),
        (5, 0.0, 1.0, 10, "samples_per_insert must be finite and > 0, got 0.0"),
        (5, float("inf"), 1.0, 10, "samples_per_insert"),
        (5, 2.0, -1.0, 10, "error_buffer must be finite and >= 0, got -1.0"),
    ],
)
def test_deadlocking_settings_are_refused(min_size, spi, buffer, capacity, pattern) -> None:
    problems = RateLimiter.problems(min_size, spi, buffer, capacity)
    assert any(pattern in problem for problem in problems), problems


def test_good_settings_have_no_problems() -> None:
    assert RateLimiter.problems(100, 4.0, 0.0, 1000) == []
    assert RateLimiter.problems(1, None, 0.0, 1) == []


@settings(max_examples=300, deadline=None)
@given(
    spi=st.floats(0.05, 64.0),
    min_size=st.integers(1, 500),
    buffer=st.floats(0.0, 2000.0),
    insert_batch=st.integers(1, 64),
    sample_batch=st.integers(1, 512),
    choices=st.lists(st.booleans(), min_size=50, max_size=400),
)
@pytest.mark.slow
def test_one_side_can_always_go_on_and_the_ratio_stays_bounded(
    spi, min_size, buffer, insert_batch, sample_batch, choices
) -> None:
    limiter = RateLimiter(min_size, spi, buffer)
    size = 0
    for wants_insert in choices:
        may_insert, may_sample = limiter.can_insert(), limiter.can_sample(size)
        assert may_insert or may_sample, f"deadlock at diff {limiter.diff}, size {size}"
        if (wants_insert and may_insert) or not may_sample:
            limiter.record_insert(insert_batch)
            size += insert_batch
        else:
            limiter.record_sample(sample_batch)
        # Each check precedes a whole batch, so diff overshoots its bound by one batch at most.
        centre = spi * min_size
        assert limiter.diff <= centre + buffer + spi * insert_batch + 1e-9
        assert limiter.diff >= min(0.0, centre - buffer) - sample_batch - 1e-9


def test_a_live_shard_holds_the_ratio_by_back_pressure() -> None:
    """spi 2, min size 100, buffer 64, batches of 100: inserts are taken while
    diff = 2·I − S <= 2·100 + 64 = 264. With nothing sampled that stops at I = 200 (the batch
    at I = 100 still passes the check). After 4 samples of 512, it stops at the first
    multiple of 100 above (264 + 2048) / 2 = 1156, i.e. 1200. Data the shard has not taken
    waits in ZeroMQ and kernel buffers, and once those fill, the actor times out."""
    shard = ShardProcess(
        "--capacity",
        "100000",
        "--min-size",
        "100",
        "--samples-per-insert",
        "2",
        "--error-buffer",
        "64",
    )
    context = zmq.Context()
    try:
        actor = InsertClient(context, [shard.endpoints], 1, SMALL_SPEC, timeout_s=0.5, hwm=2)
        requests = RequestClient(context, shard.endpoints.request, sender=2)
        batch = make_batch(SMALL_SPEC, 100)
        with pytest.raises(ReplayTimeout):
            for _ in range(100_000):  # about 44 MB offered: more than TCP buffers hold
                actor.insert(batch, np.ones(100))
        info = wait_for(
            lambda: (i := requests.info())["inserts_waiting"] and i, what="inserts wait"
        )
        assert info["transitions_added"] == 200
        for _ in range(4):
            requests.sample(512, 0.4, SMALL_SPEC)
        wait_for(lambda: requests.info()["transitions_added"] == 1200, what="inserts resumed")
        info = requests.info()
        assert info["inserts_waiting"] and info["transitions_sampled"] == 2048
        actor.close(linger_s=0)
        requests.close()
    finally:
        context.destroy(linger=0)
        assert shard.stop() == 0
