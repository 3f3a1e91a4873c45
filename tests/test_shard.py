"""A live shard in a subprocess, over real TCP sockets on 127.0.0.1."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest
import zmq
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launch.cli import main
from replay import TransitionSpec
from replay.errors import ReplayTimeout, ShardError, SpecMismatchError
from replay.inserts.client import InsertClient
from replay.inserts.endpoints import ShardEndpoints
from replay.protocol.messages import SampleRequest
from replay.protocol.requests import RequestClient
from replay.server.config import ShardConfig
from replay.server.credit_desk import MAX_WINDOW
from replay.server.shard import ShardServer
from replay.wire.layout import Kind, Message, decode, encode
from tests.conftest import SMALL_SPEC, STOP_TIMEOUT_S, ShardProcess, info, make_batch, wait_for


def test_insert_sample_update_round_trip(shard: ShardProcess, context: zmq.Context) -> None:
    requests = RequestClient(context, shard.endpoints.request, sender=1)
    assert requests.spec() == SMALL_SPEC
    inserts = InsertClient(context, [shard.endpoints], sender=5, spec=SMALL_SPEC)
    before = requests.info()["transitions_added"]
    for first in range(0, 40, 10):
        inserts.insert(
            make_batch(SMALL_SPEC, 10, first_id=1000 + first), np.ones(10), policy_version=3
        )
    wait_for(lambda: requests.info()["transitions_added"] == before + 40, what="40 inserts")
    reply = requests.sample(32, 0.4, SMALL_SPEC)
    indices, generations = reply.indices, reply.generations
    assert reply.weights.dtype == np.float32 and (reply.weights <= 1).all()
    assert reply.size == min(64, before + 40) and reply.capacity == 64
    assert reply.fields["obs"].shape == (32, 4)
    # Overwrite everything, then the old sample's updates must all be dropped as stale.
    inserts.insert(make_batch(SMALL_SPEC, 64, first_id=5000), np.ones(64))
    wait_for(lambda: requests.info()["transitions_added"] == before + 104, what="overwrite")
    dropped_before = requests.info()["dropped_stale_updates"]
    requests.update(indices, generations, np.full(32, 3.0))
    counters = wait_for(
        lambda: (c := requests.info())["dropped_stale_updates"] == dropped_before + 32 and c,
        what="stale updates counted",
    )
    assert counters["senders"]["5"]["policy_version_max"] == 3
    fresh = requests.sample(8, 0.4, SMALL_SPEC)
    requests.update(fresh.indices, fresh.generations, np.full(8, 2.0))
    wait_for(lambda: requests.info()["updates_applied"] >= 2, what="update applied")
    inserts.close()
    requests.close()


def test_a_client_with_another_spec_fails_at_start(
    shard: ShardProcess, context: zmq.Context
) -> None:
    other = TransitionSpec.from_dict({"obs": ((8,), "float32")})
    with pytest.raises(SpecMismatchError, match="this actor sends"):
        InsertClient(context, [shard.endpoints], sender=6, spec=other)


def test_bad_requests_get_error_replies(shard: ShardProcess, context: zmq.Context) -> None:
    requests = RequestClient(context, shard.endpoints.request, sender=7)
    with pytest.raises(ShardError, match="count > 0"):
        requests.sample(0, 0.4, SMALL_SPEC)
    with pytest.raises(ShardError, match="unexpected kind INSERT"):
        requests.call(Kind.INSERT, Kind.SAMPLE_REPLY)
    requests.close()


junk_frames = st.lists(st.binary(max_size=64), min_size=1, max_size=4)


@pytest.mark.slow
def test_malformed_messages_are_counted_and_the_shard_keeps_serving(
    shard: ShardProcess, context: zmq.Context
) -> None:
    before = info(context, shard)
    push = context.socket(zmq.PUSH)
    push.connect(shard.endpoints.insert)
    dealer = context.socket(zmq.DEALER)
    dealer.connect(shard.endpoints.request)
    wrong_fields = encode(
        Message(Kind.INSERT, 9, 0, 0, 2, 0.0, (np.zeros((2, 4), np.float32), np.ones(2)))
    )
    batch = make_batch(SMALL_SPEC, 2)
    nan_priority = encode(
        Message(Kind.INSERT, 9, 0, 0, 2, 0.0, (*batch.values(), np.array([1.0, np.nan])))
    )
    sent = [0]

    @settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def send_malformed(data: st.DataObject) -> None:
        # Draw everything before sending: hypothesis may abandon an example mid-draw.
        choice = data.draw(st.sampled_from(["junk", "wrong fields", "nan priority"]))
        junk_insert = data.draw(junk_frames)
        junk_request = data.draw(junk_frames)
        frames = {"junk": junk_insert, "wrong fields": wrong_fields, "nan priority": nan_priority}
        push.send_multipart(frames[choice])
        dealer.send_multipart(junk_request)
        sent[0] += 2

    send_malformed()
    expected = before["rejected_total"] + sent[0]
    counters = wait_for(
        lambda: (c := info(context, shard))["rejected_total"] >= expected and c,
        timeout_s=30,
        what=f"{sent[0]} rejections",
    )
    assert counters["rejected_total"] == expected, (before["rejected"], counters["rejected"], sent)
    assert counters["transitions_added"] == before["transitions_added"]
    requests = RequestClient(context, shard.endpoints.request, sender=8)
    reply = requests.sample(16, 0.4, SMALL_SPEC)
    assert np.isfinite(reply.priorities).all() and (reply.priorities > 0).all()
    requests.close()
    push.close(linger=0)
    dealer.close(linger=0)


def test_sigterm_stops_a_shard_promptly_and_frees_its_ports() -> None:
    process = ShardProcess("--capacity", "16")
    started = time.monotonic()
    assert process.stop() == 0
    assert time.monotonic() - started < STOP_TIMEOUT_S
    context = zmq.Context()
    try:
        for endpoint in (process.endpoints.insert, process.endpoints.request):
            socket = context.socket(zmq.PULL)
            socket.bind(endpoint)  # raises EADDRINUSE if the shard left its socket behind
            socket.close(linger=0)
    finally:
        context.term()


def test_a_shard_without_snapshots_stops_at_once_right_after_an_insert() -> None:
    """The stop grace serves on until the senders go quiet so that the final snapshot
    holds their last flush; a shard that keeps no snapshots would drop those batches at
    exit all the same, and leaves at once, even just after an insert and with a quiet
    period far longer than the wait here."""
    server = ShardServer(
        ShardConfig(spec=SMALL_SPEC, capacity=1000, stop_quiet_s=60.0, stop_grace_s=120.0)
    )
    serving = threading.Thread(target=server.serve)
    serving.start()
    context = zmq.Context()
    endpoints = ShardEndpoints(server.insert_endpoint, server.request_endpoint)
    client = InsertClient(context, [endpoints], sender=3, spec=SMALL_SPEC, timeout_s=5)
    try:
        client.insert(make_batch(SMALL_SPEC, 50), np.ones(50))
        assert client.flush(10)  # taken: the shard's last insert is now
        server.stop()
        serving.join(STOP_TIMEOUT_S)
        assert not serving.is_alive()
    finally:
        client.close(0)
        server.stop()
        serving.join(130)
        context.term()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--capacity", "10", "--min-size", "20"], "min_size=20"),
        (["--samples-per-insert", "0"], "--samples-per-insert"),
        (["--field", "obs:4"], "NAME:SHAPE:DTYPE"),
        (["--field", "obs:4:complex64"], "not a plain numeric"),
        (["--insert-port", "70000"], "--insert-port"),
    ],
)
def test_bad_shard_settings_are_refused_before_binding(arguments, message) -> None:
    result = CliRunner().invoke(main, ["replay", *arguments])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.slow
@pytest.mark.parametrize("credit", [None, 8])
def test_back_pressure_reaches_a_sender_after_a_bounded_backlog(
    context: zmq.Context, credit: int | None
) -> None:
    # Nothing samples, so the rate limiter stops inserts after about 300 transitions; from
    # then on every batch sent waits somewhere between the client and the shard. Left to
    # the kernel, TCP buffers on loopback grow to megabytes and take thousands of CartPole
    # batches before the sender feels anything: data that is stale when it lands. Credit
    # (CREDIT) bounds the backlog exactly.
    shard = ShardProcess(
        "--capacity",
        "100000",
        "--min-size",
        "100",
        "--samples-per-insert",
        "1",
        "--error-buffer",
        "200",
    )
    try:
        # With credit, the client learns what the shard took from an answer that a busy
        # machine may take over half a second to deliver: it waits long enough for it.
        # With credit, a queue of its own deeper than the shard's window, so that the
        # credit is what stops it.
        inserts = InsertClient(
            context,
            [shard.endpoints],
            sender=7,
            spec=SMALL_SPEC,
            timeout_s=0.5 if credit is None else 3.0,
            credit=credit,
            hwm=16 if credit is None else 2 * MAX_WINDOW,
        )
        batch, priorities = make_batch(SMALL_SPEC, 50), np.ones(50)
        sent, deadline = 0, time.monotonic() + 60
        with pytest.raises(ReplayTimeout):
            while time.monotonic() < deadline and sent < 20_000:
                inserts.insert(batch, priorities)
                sent += 1
        counters = info(context, shard)
        added = counters["transitions_added"]
        assert counters["rejected_total"] == 0, counters["rejected"]  # credit asks included
        if credit is None:
            # Client queue (16) + shard queue (64) + two kernel buffers of ~2 loopback
            # segments.
            assert added <= 400 and sent <= 400, (added, sent)
        else:
            assert added == 350, added  # the limiter's 300, overshot by the last batch
            # The only sender: the shard's whole window (of small batches, the most),
            # more than its share.
            assert sent == added // 50 + max(credit, MAX_WINDOW), (added, sent)
            assert counters["senders"]["7"]["insert_messages_taken"] == added // 50
        inserts.close(linger_s=0)
    finally:
        assert shard.stop() == 0


def test_a_credit_request_is_held_until_enough_inserts_are_taken(
    shard: ShardProcess, context: zmq.Context
) -> None:
    asker = context.socket(zmq.DEALER)
    asker.setsockopt(zmq.LINGER, 0)
    asker.connect(shard.endpoints.request)
    pusher = context.socket(zmq.PUSH)
    pusher.setsockopt(zmq.LINGER, 0)
    pusher.connect(shard.endpoints.insert)

    def ask(wanted: float, wait_ms: int) -> None:
        asker.send_multipart(
            encode(Message(Kind.CREDIT, 31, 0, -1, wait_ms, wanted, incarnation=7))
        )

    def reply():
        assert asker.poll(5000), "no CREDIT reply"
        return decode(asker.recv_multipart())

    lanes = itertools.count()

    def push_batch() -> None:
        arrays = (*make_batch(SMALL_SPEC, 4).values(), np.ones(4))
        pusher.send_multipart(
            encode(Message(Kind.INSERT, 31, next(lanes), -1, 4, 0.0, arrays, incarnation=7))
        )

    ask(0.0, 0)
    start = reply().scalar  # what this sender id had sent before (nothing)
    assert start == 0.0
    ask(start + 2, 10_000)
    push_batch()
    # One batch is not enough: the shard holds the answer while the batch lands.
    wait_for(
        lambda: info(context, shard)["senders"].get("31", {}).get("insert_messages_taken") == 1,
        what="first batch taken",
    )
    assert not asker.poll(0)
    push_batch()
    answer = reply()
    assert answer.kind == Kind.CREDIT_REPLY and answer.scalar == 2.0
    # A count never reached is answered when the asker's wait runs out.
    ask(50.0, 100)
    assert reply().scalar == 2.0
    # Not a count: refused with an ERROR and counted.
    ask(float("nan"), 0)
    assert reply().kind == Kind.ERROR
    assert info(context, shard)["senders"]["31"]["rejected"] == {"request": 1}
    asker.close()
    pusher.close()


def test_a_full_sample_queue_drops_its_oldest_request_not_the_newest(
    context: zmq.Context,
) -> None:
    """A learner held back by the shard (too little data, or the rate limiter) re-asks
    after its timeout; the shard keeps the newest requests, and refuses none."""
    shard = ShardProcess("--capacity", "1000", "--min-size", "100")
    asker = RequestClient(context, shard.endpoints.request, sender=3)
    inserts = InsertClient(context, [shard.endpoints], sender=4, spec=SMALL_SPEC)
    try:
        for _ in range(70):
            asker.send(SampleRequest(8, 0.4), block=True)
        # The queue holds 64 before the last 6 arrive: wait for all 70 to have landed.
        counters = wait_for(
            lambda: (c := info(context, shard))["waiting_samples_dropped"] == 6 and c,
            what="the 6 oldest requests dropped",
        )
        assert counters["samples_waiting"] == 64 and counters["rejected_total"] == 0
        inserts.insert(make_batch(SMALL_SPEC, 100), np.ones(100))
        answered: list[int] = []
        wait_for(
            lambda: answered.extend(m.sequence for m in asker.drain()) or len(answered) == 64,
            what="the waiting requests answered",
            interval_s=0.05,
        )
        assert sorted(answered) == list(range(6, 70))
    finally:
        inserts.close(linger_s=0)
        asker.close()
        shard.stop()
