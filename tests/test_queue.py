"""Queue mode: unrolls handed out once each, oldest first, inserts held back while the
learner is behind; the store alone, then a real queue shard over TCP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import zmq

from replay.errors import (
    EmptyReplayError,
    InvalidBatchError,
    InvalidIndexError,
    ReplayError,
    SnapshotError,
)
from replay.inserts.client import InsertClient
from replay.protocol.requests import RequestClient
from replay.store.queue import QueueFullError, UnrollQueue
from replay.store.spec import TransitionSpec
from tests.conftest import ShardProcess, info, wait_for

T = 5
UNROLL_SPEC = TransitionSpec.from_dict(
    {
        "obs": ((T + 1, 3), "float32"),
        "action": ((T,), "int64"),
        "reward": ((T,), "float32"),
        "discount": ((T,), "float32"),
        "log_prob": ((T,), "float32"),
    }
)
VERSIONED_SPEC = TransitionSpec.from_dict(
    {**{name: (f.shape, f.dtype) for name, f in UNROLL_SPEC.items()}, "version": ((), "int64")}
)
UNROLL_FIELDS = (
    "obs:6,3:float32",
    "action:5:int64",
    "reward:5:float32",
    "discount:5:float32",
    "log_prob:5:float32",
)


FIELD_OPTIONS = [option for field in UNROLL_FIELDS for option in ("--field", field)]


@contextmanager
def clients(
    context: zmq.Context, shard: ShardProcess, insert_timeout_s: float, request_timeout_s: float
) -> Iterator[tuple[InsertClient, RequestClient]]:
    """An actor's insert client and a learner's request client of ``shard``."""
    inserts = InsertClient(
        context, [shard.endpoints], sender=3, spec=UNROLL_SPEC, timeout_s=insert_timeout_s
    )
    requests = RequestClient(
        context, shard.endpoints.request, sender=9, timeout_s=request_timeout_s
    )
    try:
        yield inserts, requests
    finally:
        inserts.close(linger_s=0)
        requests.close()


def unrolls(count: int, first: int) -> dict[str, np.ndarray]:
    """``count`` unrolls numbered from ``first`` (the number is in every action)."""
    numbers = np.arange(first, first + count)
    return {
        "obs": np.broadcast_to(numbers[:, None, None], (count, T + 1, 3)).astype(np.float32),
        "action": np.repeat(numbers[:, None], T, axis=1).astype(np.int64),
        "reward": np.ones((count, T), np.float32),
        "discount": np.full((count, T), 0.99, np.float32),
        "log_prob": np.full((count, T), -0.5, np.float32),
    }


def numbers(batch) -> list[int]:
    return batch.transitions["action"][:, 0].tolist()


def test_a_queue_hands_each_item_out_once_oldest_first_across_the_wrap():
    queue = UnrollQueue(UNROLL_SPEC, 8)
    queue.add(unrolls(6, 0))
    assert numbers(queue.sample(4)) == [0, 1, 2, 3]
    queue.add(unrolls(6, 6))  # wraps: slots 6, 7, then 0-3, freed by the sample
    assert queue.size == 8 and queue.room == 0
    first = queue.sample(5)
    assert numbers(first) == [4, 5, 6, 7, 8]
    assert first.weights.tolist() == [1.0] * 5
    assert first.generations.tolist() == [4, 5, 6, 7, 8]
    assert numbers(queue.sample(3)) == [9, 10, 11]
    with pytest.raises(EmptyReplayError, match="1 items asked, 0 queued"):
        queue.sample(1)


def test_a_full_queue_refuses_a_batch_and_keeps_what_it_holds():
    queue = UnrollQueue(UNROLL_SPEC, 4)
    queue.add(unrolls(3, 0))
    with pytest.raises(QueueFullError, match="3 of 4 are queued"):
        queue.add(unrolls(2, 3))
    assert queue.size == 3 and queue.items_added == 3
    assert numbers(queue.sample(3)) == [0, 1, 2]
    with pytest.raises(ReplayError, match="no priorities"):
        queue.update_priorities(np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1))


def test_a_queue_takes_unrolls_of_an_actor_before_its_first_weights():
    queue = UnrollQueue(VERSIONED_SPEC, 8)
    batch = {**unrolls(2, 0), "version": np.array([-1, 0], np.int64)}  # initial weights: -1
    queue.add(batch)
    assert queue.size == 2
    with pytest.raises(InvalidBatchError, match=r"version.*outside"):
        queue.add({**unrolls(1, 2), "version": np.array([-2], np.int64)})


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("log_prob", np.nan, "not finite"),
        ("reward", np.inf, "not finite"),
        ("log_prob", 0.5, "outside"),
        ("discount", 1.5, "outside"),
        ("discount", -0.1, "outside"),
        ("action", -1, "outside"),
    ],
)
def test_a_queue_refuses_unrolls_with_values_out_of_bounds(field, value, reason):
    queue = UnrollQueue(UNROLL_SPEC, 8)
    queue.add(unrolls(2, 0))
    bad = unrolls(3, 2)
    bad[field][1, 2] = value
    with pytest.raises(InvalidBatchError, match=f"{field}.*{reason}"):
        queue.add(bad)
    assert queue.size == 2 and queue.items_added == 2  # nothing of it stored
    assert numbers(queue.sample(2)) == [0, 1]


def test_a_queue_shard_refuses_and_counts_a_bad_unroll_and_keeps_the_good(
    queue_shard: ShardProcess, context: zmq.Context
) -> None:
    with clients(context, queue_shard, 1.0, 10.0) as (inserts, requests):
        bad = unrolls(4, 4)
        bad["log_prob"][0, 0] = np.nan
        for batch in (unrolls(4, 0), bad, unrolls(4, 8)):
            inserts.insert(batch, np.ones(4))
        info = wait_for(
            lambda: (i := requests.info())["rejected_total"] and i["transitions_added"] == 8 and i,
            what="two taken, one refused",
        )
        assert info["rejected_total"] == 1 and info["size"] == 8
        reply = requests.sample(8, 0.0, UNROLL_SPEC)
        assert reply.fields["action"][:, 0].tolist() == [0, 1, 2, 3, 8, 9, 10, 11]


def test_a_replay_share_mixes_handed_out_items_into_each_batch():
    queue = UnrollQueue(UNROLL_SPEC, 16, replay_share=0.25, seed=1)
    queue.add(unrolls(8, 0))
    # Nothing handed out yet: nothing to replay, the batch is all fresh.
    assert queue.fresh_needed(4) == 4 and numbers(queue.sample(4)) == [0, 1, 2, 3]
    batch = queue.sample(4)  # one of four replayed, from the items handed out before
    assert numbers(batch)[:3] == [4, 5, 6] and numbers(batch)[3] in range(4)
    assert batch.generations.tolist()[:3] == [4, 5, 6] and queue.size == 1
    assert queue.fresh_needed(4) == 3 and queue.replayed == 1
    queue.add(unrolls(15, 8))  # overwrites handed-out slots: 16 in the ring, 16 queued
    assert queue.size == 16 and queue.replayable(4) == 0  # none handed out is left
    with pytest.raises(InvalidIndexError, match="replay_share"):
        UnrollQueue(UNROLL_SPEC, 16, replay_share=1.0)


def test_a_queue_snapshot_brings_back_the_items_and_the_cursor():
    queue = UnrollQueue(UNROLL_SPEC, 8)
    queue.add(unrolls(7, 0))
    queue.sample(3)
    arrays, meta = queue.state()
    stored = {
        name: np.array(value.array if hasattr(value, "array") else value)
        for name, value in arrays.items()
    }

    def read(name, out=None):
        if out is None:
            return stored[name]
        out[: len(stored[name])] = stored[name]
        return out

    back = UnrollQueue(UNROLL_SPEC, 8)
    back.restore(read, meta)
    assert back.size == 4 and back.handed == 3
    assert numbers(back.sample(4)) == [3, 4, 5, 6]
    with pytest.raises(SnapshotError, match="cursor"):
        UnrollQueue(UNROLL_SPEC, 8).restore(read, {**meta, "queue": {"handed": 9}})


@pytest.fixture
def queue_shard():
    process = ShardProcess(*FIELD_OPTIONS, "--queue", "--capacity", "60", "--min-size", "4")
    yield process
    process.stop()


def test_a_queue_shard_serves_oldest_first_and_holds_inserts_back_when_full(
    queue_shard: ShardProcess, context: zmq.Context
) -> None:
    with clients(context, queue_shard, 0.2, 10.0) as (inserts, requests):
        # A message goes in only while 50 items (insert_batch_hint) fit: of 60, two of 8.
        inserts.insert(unrolls(8, 0), np.ones(8))
        inserts.insert(unrolls(8, 8), np.ones(8))
        wait_for(lambda: requests.info()["size"] == 16, what="the first unrolls")
        inserts.insert(unrolls(8, 16), np.ones(8))
        wait_for(lambda: requests.info()["inserts_waiting"], what="inserts held back")
        assert requests.info()["size"] == 16  # the third message waits in the socket
        reply = requests.sample(6, 0.0, UNROLL_SPEC)
        assert reply.fields["action"][:, 0].tolist() == [0, 1, 2, 3, 4, 5]
        assert reply.fields["obs"].shape == (6, T + 1, 3)
        # 10 queued, 50 free: the waiting message goes in.
        wait_for(lambda: requests.info()["transitions_added"] == 24, what="the third message")
        reply = requests.sample(18, 0.0, UNROLL_SPEC)
        assert reply.fields["action"][:, 0].tolist() == list(range(6, 24))
        # Priorities do not apply: an update is refused and counted, the queue unchanged.
        requests.update(reply.indices, reply.generations, np.ones(18))
        info = wait_for(lambda: (i := requests.info())["rejected_total"] and i, what="refusal")
        assert info["size"] == 0 and info["transitions_added"] == 24


@pytest.mark.slow
def test_a_queue_shard_sample_waits_for_enough_unrolls(
    queue_shard: ShardProcess, context: zmq.Context
) -> None:
    with clients(context, queue_shard, 10.0, 1.0) as (inserts, requests):
        inserts.insert(unrolls(5, 0), np.ones(5))
        # INFO on a client of its own: this one's 1 s timeout is for the SAMPLE below, and
        # a loaded machine has taken longer than that to connect (CI-like full run).
        wait_for(lambda: info(context, queue_shard)["size"] == 5, what="five unrolls")
        with pytest.raises(ReplayError):  # six asked, five queued: it waits, past the timeout
            requests.sample(6, 0.0, UNROLL_SPEC)
        inserts.insert(unrolls(5, 5), np.ones(5))
        # The request that waited is answered once six are there: it took six of ten.
        wait_for(
            lambda: info(context, queue_shard)["size"] == 4, what="the waiting request answered"
        )


@pytest.mark.slow
def test_a_queue_shard_comes_back_from_its_snapshot_with_its_cursor(
    tmp_path, context: zmq.Context
) -> None:
    options = (*FIELD_OPTIONS, "--queue", "--capacity", "60")
    shard = ShardProcess(*options, "--snapshot-dir", str(tmp_path))
    try:
        inserts = InsertClient(context, [shard.endpoints], sender=4, spec=UNROLL_SPEC)
        inserts.insert(unrolls(10, 0), np.ones(10))
        inserts.close(linger_s=5.0)
        requests = RequestClient(context, shard.endpoints.request, sender=9, timeout_s=10.0)
        wait_for(lambda: requests.info()["size"] == 10, what="ten unrolls")
        assert requests.sample(4, 0.0, UNROLL_SPEC).fields["action"][:, 0].tolist() == [0, 1, 2, 3]
        requests.close()
    finally:
        assert shard.stop() == 0  # SIGTERM: a final snapshot
    shard = ShardProcess(*options, "--restore", str(tmp_path))
    try:
        requests = RequestClient(context, shard.endpoints.request, sender=9, timeout_s=10.0)
        info = requests.info()
        assert info["size"] == 6 and info["transitions_added"] == 10
        back = requests.sample(6, 0.0, UNROLL_SPEC).fields["action"][:, 0].tolist()
        assert back == [4, 5, 6, 7, 8, 9]  # what was handed out is not handed out again
        requests.close()
    finally:
        shard.stop()


@pytest.mark.slow
def test_a_queue_shard_refuses_settings_that_do_not_apply(tmp_path) -> None:
    with pytest.raises(AssertionError, match="samples_per_insert does not apply"):
        ShardProcess(*FIELD_OPTIONS, "--queue", "--samples-per-insert", "2")
    with pytest.raises(AssertionError, match="must hold insert_batch_hint"):
        ShardProcess(*FIELD_OPTIONS, "--queue", "--capacity", "40")
    with pytest.raises(AssertionError, match="replay_share is for queue mode"):
        ShardProcess(*FIELD_OPTIONS, "--replay-share", "0.5")


def test_a_queue_shard_with_a_replay_share_waits_only_for_the_fresh_part(
    context: zmq.Context,
) -> None:
    shard = ShardProcess(
        *FIELD_OPTIONS, "--queue", "--capacity", "60", "--min-size", "1", "--replay-share", "0.5"
    )
    try:
        with clients(context, shard, 1.0, 10.0) as (inserts, requests):
            inserts.insert(unrolls(6, 0), np.ones(6))
            wait_for(lambda: requests.info()["size"] == 6, what="the unrolls")
            first = requests.sample(4, 0.0, UNROLL_SPEC).fields["action"][:, 0].tolist()
            assert first == [0, 1, 2, 3]
            # Half of the next 4 are replayed: 2 fresh of the 2 queued, so it is answered.
            actions = requests.sample(4, 0.0, UNROLL_SPEC).fields["action"][:, 0].tolist()
            assert actions[:2] == [4, 5] and set(actions[2:]) <= {0, 1, 2, 3}
            assert requests.info()["size"] == 0
    finally:
        shard.stop()


def test_a_learner_that_drained_its_queue_shard_asks_again_at_once(
    queue_shard: ShardProcess, context: zmq.Context
) -> None:
    from replay.sampling.pump import SamplerConfig
    from replay.sampling.sampler import make_sampler

    config = SamplerConfig(
        endpoints=(queue_shard.endpoints.request,),
        batch_size=4,
        prefetch=1,
        sender=11,
        io_thread=True,
    )
    with clients(context, queue_shard, 10.0, 10.0) as (inserts, _):
        inserts.insert(unrolls(4, 0), np.ones(4))
        wait_for(lambda: info(context, queue_shard)["size"] == 4, what="the first unrolls")
        with make_sampler(config, UNROLL_SPEC) as sampler:
            assert numbers(sampler.next_batch(timeout_s=10.0)) == [0, 1, 2, 3]
            # The shard it drained is empty: its next request waits there for unrolls,
            # not for an INFO to show the shard filling (a probe interval later).
            wait_for(
                lambda: info(context, queue_shard)["samples_waiting"] == 1,
                what="a request held by the empty shard",
            )
            inserts.insert(unrolls(4, 4), np.ones(4))
            assert numbers(sampler.next_batch(timeout_s=10.0)) == [4, 5, 6, 7]


def test_a_learner_s_new_connection_drops_what_its_old_one_held(
    queue_shard: ShardProcess, context: zmq.Context
) -> None:
    from replay.protocol import messages

    endpoint = queue_shard.endpoints.request
    old = RequestClient(context, endpoint, sender=11, timeout_s=10.0)
    old.send(messages.SampleRequest(4, 0.0))  # the queue is empty: held
    wait_for(lambda: info(context, queue_shard)["samples_waiting"] == 1, what="a held request")
    old.close()  # the learner is gone (killed; its replacement connects anew)
    new = RequestClient(context, endpoint, sender=11, timeout_s=10.0)
    try:
        counters = new.info()
        assert counters["samples_waiting"] == 0 and counters["waiting_samples_dropped"] == 1
        with clients(context, queue_shard, 10.0, 10.0) as (inserts, _):
            inserts.insert(unrolls(4, 0), np.ones(4))
            wait_for(lambda: new.info()["size"] == 4, what="the unrolls, kept for the new one")
            reply = new.sample(4, 0.0, UNROLL_SPEC)
            assert reply.fields["action"][:, 0].tolist() == [0, 1, 2, 3]
    finally:
        new.close()
