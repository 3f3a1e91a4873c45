"""The learner's prefetching sampler over live shards: exact cross-shard distribution,
global importance weights, priority routing, and a shard that stops answering."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from replay.errors import ReplayTimeout
from replay.inserts.client import InsertClient
from replay.protocol.requests import RequestClient
from replay.sampling.assembly import BatchArrays
from replay.sampling.pump import SamplerConfig
from replay.sampling.sampler import InlineSampler, ThreadedSampler
from replay.sampling.sampler import make_sampler as sampler_for
from tests.conftest import SMALL_SPEC, ShardProcess, chi2_critical, make_batch, wait_for

ALPHA = 0.6
BETA = 0.4
# Items per shard and their priority scale: masses differ a lot, so splitting a batch by
# anything but mass would be visible.
SHARD_ITEMS = (30, 20, 40)
SHARD_SCALE = (1.0, 8.0, 0.3)


@pytest.fixture
def filled_shards(context: zmq.Context) -> Iterator[tuple[list[ShardProcess], np.ndarray]]:
    """Three shards; item ``1000·s + k`` of shard ``s`` has priority ``priorities[id]``."""
    rng = np.random.default_rng(21)
    shards = ShardProcess.start_all(
        *[("--capacity", "64", "--seed", str(s), "--shard-index", str(s)) for s in range(3)]
    )
    priorities = np.zeros(3000)
    try:
        for index, (shard, count, scale) in enumerate(
            zip(shards, SHARD_ITEMS, SHARD_SCALE, strict=True)
        ):
            first = 1000 * index
            values = scale * rng.uniform(0.2, 2.0, count)
            priorities[first : first + count] = values
            client = InsertClient(context, [shard.endpoints], sender=50 + index, spec=SMALL_SPEC)
            client.insert(make_batch(SMALL_SPEC, count, first_id=first), values)
            client.close()
            requests = RequestClient(context, shard.endpoints.request, sender=60 + index)
            wait_for(
                lambda r=requests, c=count: r.info()["size"] == c, what=f"shard {index} filled"
            )
            requests.close()
        yield shards, priorities
    finally:
        for shard in shards:
            os.kill(shard.process.pid, signal.SIGCONT)
        assert ShardProcess.stop_all(shards) == [0, 0, 0]


@pytest.fixture(params=[True, False], ids=["io-thread", "inline"])
def io_thread(request) -> bool:
    """Every test runs with the sampler's background I/O thread and without it."""
    return request.param


def make_sampler(
    shards: list[ShardProcess], io_thread: bool, arrays: BatchArrays | None = None, **overrides
) -> InlineSampler | ThreadedSampler:
    settings = {"batch_size": 512, "beta": BETA, "prefetch": 4, "sender": 9, "io_thread": io_thread}
    settings.update(overrides)
    config = SamplerConfig(endpoints=tuple(s.endpoints.request for s in shards), **settings)
    return sampler_for(config, SMALL_SPEC, arrays=arrays)


class TakenArrays(BatchArrays):
    """Fresh arrays, each batch's kept to check that the batch was written into them."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: list[dict[str, np.ndarray]] = []

    def take(self, spec, rows: int) -> dict[str, np.ndarray]:
        self.taken.append(super().take(spec, rows))
        return self.taken[-1]


@pytest.mark.slow
def test_sharded_sampling_matches_one_store_holding_everything(
    io_thread: bool, filled_shards
) -> None:
    """102,400 draws over 90 items in 3 shards; chi-square at significance 1e-3 against
    p^α / Σ p^α over all shards (stratified draws make this conservative). The negative
    control, an even split of each batch across shards, must be rejected."""
    shards, priorities = filled_shards
    live = priorities > 0
    stored = priorities**ALPHA
    counts = np.zeros(3000)
    # A shard marked down (a busy machine, two seconds without an answer) has its parts
    # drawn elsewhere by design, which is not this distribution: give every answer time.
    arrays = TakenArrays()
    with make_sampler(shards, io_thread, arrays, shard_timeout_s=60.0) as sampler:
        for _ in range(200):
            batch = sampler.next_batch()
            ids = batch.transitions["action"]
            # Each part was decoded into the batch's own rows (replay.sampling.assembly).
            assert any(ids is taken["action"] for taken in arrays.taken)
            np.add.at(counts, ids, 1)
            np.testing.assert_array_equal(ids // 1000, batch.shards)
            # Weights: (N·P(i))^-β / max_j (N·P(j))^-β over every stored item.
            probability = stored / stored.sum()
            n = live.sum()
            expected = (n * probability[ids]) ** -BETA / ((n * probability[live]) ** -BETA).max()
            np.testing.assert_allclose(batch.weights, expected, rtol=1e-5)
    target = stored[live] / stored[live].sum()
    observed = counts[live]
    statistic = (((observed - observed.sum() * target) ** 2) / (observed.sum() * target)).sum()
    assert sum(state["outages"] for state in sampler.shard_states()) == 0
    critical = chi2_critical(int(live.sum()) - 1, 1e-3)
    assert statistic < critical
    shard_of = np.flatnonzero(live) // 1000
    even_split = np.zeros_like(target)
    for s in range(3):
        mine = shard_of == s
        even_split[mine] = target[mine] / target[mine].sum() / 3
    wrong = (((observed - observed.sum() * even_split) ** 2) / (observed.sum() * even_split)).sum()
    assert wrong > 10 * critical


@pytest.mark.slow
def test_priority_updates_reach_the_owning_shards(
    io_thread: bool, filled_shards, context: zmq.Context
) -> None:
    shards, priorities = filled_shards
    with make_sampler(shards, io_thread, batch_size=64) as sampler:
        batch = sampler.next_batch()
        new = np.arange(1.0, 65.0)
        sampler.update_priorities(batch, new)
        final = priorities.copy()
        for item, value in zip(batch.transitions["action"], new, strict=True):
            final[item] = value  # repeated items: the last value wins
        for index, shard in enumerate(shards):
            requests = RequestClient(context, shard.endpoints.request, sender=70 + index)
            mine = final[1000 * index : 1000 * index + 1000]
            expected = float((mine[mine > 0] ** ALPHA).sum())
            wait_for(
                lambda r=requests, e=expected: abs(r.info()["total_priority"] - e) < 1e-9 * e,
                what=f"shard {index} total after updates",
            )
            assert requests.info()["dropped_stale_updates"] == 0
            requests.close()


@pytest.mark.slow
def test_a_stopped_shard_is_skipped_then_used_again(io_thread: bool, filled_shards) -> None:
    shards, _ = filled_shards
    frozen = shards[1]
    with make_sampler(
        shards, io_thread, batch_size=64, shard_timeout_s=0.3, probe_interval_s=0.1
    ) as sampler:
        sampler.next_batch()
        os.kill(frozen.process.pid, signal.SIGSTOP)
        # The learner keeps training: its requests to the frozen shard time out.
        wait_for(
            lambda: sampler.next_batch(timeout_s=5) and not sampler.shard_states()[1]["alive"],
            what="shard 1 marked down",
        )
        for _ in range(20):  # batches keep coming, from the other shards only
            batch = sampler.next_batch(timeout_s=5)
        assert 1 not in batch.shards and batch.indices.size == 64
        os.kill(frozen.process.pid, signal.SIGCONT)
        wait_for(lambda: sampler.shard_states()[1]["alive"], what="shard 1 readmitted")
        wait_for(lambda: 1 in sampler.next_batch(timeout_s=5).shards, what="shard 1 sampled again")
        assert sampler.parts_redrawn >= 1


@pytest.mark.slow
def test_every_shard_frozen_at_once_stalls_the_sampler_but_never_breaks_it(
    io_thread: bool, filled_shards
) -> None:
    shards, _ = filled_shards
    with make_sampler(
        shards, io_thread, batch_size=64, prefetch=4, shard_timeout_s=0.3, probe_interval_s=0.1
    ) as sampler:
        sampler.next_batch()
        for shard in shards:
            os.kill(shard.process.pid, signal.SIGSTOP)
        try:
            # Taking the ready batches sends requests for as many more, which all expire
            # together: a re-draw that finds no live shard drops its whole batch, parts
            # that were about to expire included.
            with pytest.raises(ReplayTimeout):
                for _ in range(10):
                    sampler.next_batch(timeout_s=1.0)
            wait_for(
                lambda: not any(s["alive"] for s in sampler.shard_states()),
                what="every shard marked down",
                interval_s=0.05,
            )
        finally:
            for shard in shards:
                os.kill(shard.process.pid, signal.SIGCONT)
        wait_for(
            lambda: all(s["alive"] for s in sampler.shard_states()),
            what="shards readmitted",
            interval_s=0.05,
        )
        for _ in range(10):
            assert sampler.next_batch(timeout_s=5).indices.size == 64
        assert sampler.shard_states()[0]["outages"] == 1


def compute_for(seconds: float) -> None:
    """Stands for a long training step, evaluation or checkpoint: the calling thread
    computes for ``seconds`` and takes no replies meanwhile."""
    deadline = time.monotonic() + seconds
    work = np.random.default_rng(0).random((64, 64))
    while time.monotonic() < deadline:
        work = np.tanh(work @ work.T / 64)


@pytest.mark.slow
def test_a_busy_training_thread_does_not_mark_answering_shards_down(
    io_thread: bool, filled_shards
) -> None:
    """Without an I/O thread nothing takes replies while the training thread is busy (an
    evaluation, a checkpoint). Replies that arrived meanwhile must count as answers, not
    as requests overdue past ``shard_timeout_s``."""
    shards, _ = filled_shards
    with make_sampler(
        shards, io_thread, batch_size=64, prefetch=4, shard_timeout_s=0.3, probe_interval_s=0.1
    ) as sampler:
        for _ in range(3):
            sampler.next_batch(timeout_s=5)
            compute_for(0.9)  # the training thread is busy for three shard timeouts
        for _ in range(10):
            assert sampler.next_batch(timeout_s=5).indices.size == 64
        states = sampler.shard_states()
        assert [s["outages"] for s in states] == [0, 0, 0]
        assert sampler.parts_redrawn == 0


@pytest.mark.slow
@pytest.mark.parametrize("info_interval_s", [0.1, 30.0])
def test_a_shard_holding_samples_for_its_rate_limiter_is_waited_for_not_marked_down(
    io_thread: bool, context: zmq.Context, info_interval_s: float
) -> None:
    """With spi 1, min size 50 and buffer 100, 100 inserts answer three batches of 64;
    the fourth waits for inserts. The shard answers INFO meanwhile and says it holds the
    requests: the sampler waits for them instead of counting outages and re-drawing.
    Where no periodic INFO comes in time (30 s apart), the sampler asks one itself."""
    shard = ShardProcess(
        "--capacity",
        "1000",
        "--min-size",
        "50",
        "--samples-per-insert",
        "1",
        "--error-buffer",
        "100",
    )
    actor = InsertClient(context, [shard.endpoints], sender=3, spec=SMALL_SPEC)
    try:
        actor.insert(make_batch(SMALL_SPEC, 100), np.ones(100))
        # A shard timeout of 1 s: on a loaded machine the shard's INFO, which says it holds
        # the requests, has come more than 0.5 s late.
        with make_sampler(
            [shard],
            io_thread,
            batch_size=64,
            shard_timeout_s=1.0,
            probe_interval_s=0.1,
            info_interval_s=info_interval_s,
        ) as sampler:
            for _ in range(3):
                sampler.next_batch(timeout_s=5)
            with pytest.raises(ReplayTimeout):
                sampler.next_batch(timeout_s=3.0)  # three shard timeouts
            [state] = sampler.shard_states()
            assert state["alive"] and state["held_by_limiter"], state
            assert state["outages"] == 0 and state["limiter_waits"] == 1, state
            actor.insert(make_batch(SMALL_SPEC, 200, first_id=100), np.ones(200))
            for _ in range(3):
                assert sampler.next_batch(timeout_s=5).indices.size == 64
            [state] = sampler.shard_states()  # held again by now, or soon: a new wait
            assert state["outages"] == 0 and state["limiter_waits"] >= 1, state
            assert sampler.parts_redrawn == 0
    finally:
        actor.close(linger_s=0)
        assert shard.stop() == 0
