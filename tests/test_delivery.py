"""Delivery lanes: a shard takes each insert once and in order, and a client sends again
what a restarted shard or a broken connection lost (``replay.server.lanes``)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from apex.channels import ActorStatus, EpisodeCollector, EpisodeReporter
from apex.learning.delivery import delivery_report
from replay.inserts.client import InsertClient
from replay.inserts.lane import STALLED_RESEND_S
from replay.protocol.messages import CreditReply, CreditRequest
from replay.protocol.requests import RequestClient
from replay.server.credit_desk import (
    MAX_WINDOW,
    SHARED_WINDOW,
    SHARED_WINDOW_BYTES,
    CreditDesk,
    shared_window,
)
from replay.server.lanes import Verdict, admit, delivered
from replay.server.senders import SenderBook, SenderStats
from replay.store.snapshot import complete_snapshots, open_snapshot
from replay.wire.layout import Kind, Message, encode
from replay.wire.transport import make_socket
from tests.conftest import (
    SMALL_SPEC,
    STOP_TIMEOUT_S,
    ShardProcess,
    info,
    make_batch,
    wait_for,
)


def test_the_admission_rule() -> None:
    stats = SenderStats()
    assert admit(None, 9, 5, 0) == Verdict.TAKE  # untracked sender
    assert admit(stats, 0, 5, 0) == Verdict.TAKE  # a client without lanes
    # held: how many lanes just before this one the client still holds.
    assert [admit(stats, 9, lane, lane) for lane in (0, 1, 1, 0)] == [
        Verdict.TAKE,
        Verdict.TAKE,
        Verdict.DUPLICATE,
        Verdict.DUPLICATE,
    ]
    assert admit(stats, 9, 3, 2) == Verdict.GAP  # 2 is missing and the client still has it
    assert (stats.gap_pending, stats.out_of_order, stats.duplicates) == (1, 1, 2)
    assert [admit(stats, 9, lane, lane - 2) for lane in (2, 3)] == [Verdict.TAKE, Verdict.TAKE]
    # The client let 4..6 go (this shard had confirmed them, then lost them): counted, not
    # waited for.
    assert admit(stats, 9, 8, 1) == Verdict.GAP and stats.lost_at_restart == 3
    assert admit(stats, 9, 7, 0) == Verdict.TAKE and delivered(stats, 9) == 8
    # A restarted client starts its lane at 0; its predecessor's late messages keep theirs.
    assert admit(stats, 4, 0, 0) == Verdict.TAKE and delivered(stats, 4) == 1
    assert admit(stats, 9, 8, 1) == Verdict.TAKE and delivered(stats, 9) == 9
    assert admit(stats, 4, 1, 0) == Verdict.TAKE and delivered(stats, 4) == 2
    assert delivered(stats, 77) == 0 and delivered(None, 4) is None


def test_a_live_shard_drops_duplicates_refuses_gaps_and_asks_for_them(
    shard: ShardProcess, context: zmq.Context
) -> None:
    pusher = context.socket(zmq.PUSH)
    pusher.setsockopt(zmq.LINGER, 0)
    pusher.connect(shard.endpoints.insert)
    asker = RequestClient(context, shard.endpoints.request, 31, incarnation=7)

    def push(lane: int) -> None:  # the client holds every lane before it
        arrays = (*make_batch(SMALL_SPEC, 4).values(), np.ones(4))
        pusher.send_multipart(
            encode(Message(Kind.INSERT, 31, lane, -1, 4, 0.0, arrays, incarnation=7, held=lane))
        )

    try:
        for lane in (0, 1, 1, 3):
            push(lane)
        # Sender 31 is unknown to the shard until its first message is read: no KeyError.
        counters = wait_for(
            lambda: (
                (c := info(context, shard))["senders"].get("31", {}).get("insert_messages_taken")
                == 4
                and c
            ),
            what="four messages taken",
        )
        assert counters["size"] == 8  # lanes 0 and 1
        assert (counters["duplicates_dropped"], counters["out_of_order_refused"]) == (1, 1)
        assert counters["rejected_total"] == 0  # not bad input: the protocol at work
        answer = CreditReply.from_message(asker.call(CreditRequest(0, 0), Kind.CREDIT_REPLY))
        assert (answer.taken, answer.resend) == (2.0, True)  # expects lane 2; resend after it
        # The only sender, of small messages: the whole window, counted in bytes.
        assert answer.window == MAX_WINDOW
        again = asker.call(CreditRequest(0, 0), Kind.CREDIT_REPLY)
        assert not CreditReply.from_message(again).resend  # said once
        for lane in (2, 3):
            push(lane)
        wait_for(lambda: info(context, shard)["size"] == 16, what="the resent lanes stored")
    finally:
        asker.close()
        pusher.close()


@pytest.mark.slow
def test_the_last_batch_lost_with_a_broken_connection_is_sent_again(
    shard: ShardProcess, context: zmq.Context
) -> None:
    """Nothing follows the lost batch, so the shard sees no gap; the client, seeing it take
    nothing for STALLED_RESEND_S while it answers, sends what it kept again."""
    client = InsertClient(context, [shard.endpoints], sender=41, spec=SMALL_SPEC)
    try:
        client.insert(make_batch(SMALL_SPEC, 4), np.ones(4))
        assert client.flush(10)
        # The next batch goes into a connection that never reaches the shard: as good as
        # the kernel buffers of one that broke.
        connected = client._sockets[0]
        client._sockets[0] = make_socket(context, zmq.PUSH, 16)
        client._sockets[0].connect("tcp://127.0.0.1:9")  # discard: nobody listens
        client.insert(make_batch(SMALL_SPEC, 4, first_id=4), np.ones(4))
        client._sockets[0].close(linger=0)
        client._sockets[0] = connected
        asked_at = time.monotonic()
        assert client.flush(4 * STALLED_RESEND_S)
        assert time.monotonic() - asked_at >= STALLED_RESEND_S * 0.9
        counters = info(context, shard)
        assert counters["senders"]["41"]["transitions"] == 8  # the shard is shared
        assert client.delivery()["resent"] == 1
    finally:
        client.close(0)


def held_back_batches(
    context: zmq.Context, root: Path, batches: int = 16
) -> tuple[ShardProcess, InsertClient]:
    """A shard keeping snapshots in ``root`` whose limiter holds inserts (nothing samples,
    so it refuses them after about 600 transitions), and a client that has sent it
    ``batches`` batches of 50, within its credit: those past the limiter wait queued."""
    shard = ShardProcess(
        "--capacity",
        "10000",
        "--min-size",
        "100",
        "--samples-per-insert",
        "1",
        "--error-buffer",
        "500",
        "--snapshot-dir",
        str(root),
    )
    client = InsertClient(
        context, [shard.endpoints], sender=8, spec=SMALL_SPEC, timeout_s=2, credit=32
    )
    for i in range(batches):
        client.insert(make_batch(SMALL_SPEC, 50, i * 50), np.ones(50))
    wait_for(lambda: info(context, shard)["inserts_waiting"], what="the limiter to hold")
    return shard, client


def final_snapshot_size(root: Path) -> int:
    """The size a shard's newest snapshot in ``root`` records (its final one, once it
    has stopped)."""
    newest = complete_snapshots(root)[0][1]
    return int(open_snapshot(newest).meta["shard"]["size"])


@pytest.mark.slow
def test_a_flush_stops_waiting_for_a_shard_whose_limiter_holds_its_batches(
    context: zmq.Context, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A flush that is not final (as every flush was before the flag, and as any flush
    to a shard older than it is) sees the shard answer, take nothing and say its limiter
    holds inserts, and stops within a few seconds instead of waiting out its deadline;
    what the shard holds counts as unconfirmed, not lost: the shard, told to stop, takes
    it into its final snapshot. Meanwhile the lane sends nothing again: the answers say
    the limiter holds, so the silence is not a broken connection's lost tail (a blocked
    actor once resent 12,000 transitions every STALLED_RESEND_S; here shortened to 0.2 s)."""
    monkeypatch.setattr("replay.inserts.lane.STALLED_RESEND_S", 0.2)
    shard, client = held_back_batches(context, tmp_path)
    try:
        started = time.monotonic()
        assert not client.flush(30, final=False)
        assert time.monotonic() - started < 10
        held = client.delivery()["unconfirmed"]
        assert held > 0 and held + info(context, shard)["size"] == 800
        assert client.delivery()["resent"] == 0
    finally:
        assert shard.stop() == 0
        client.close(0)
    assert final_snapshot_size(tmp_path) == 800  # 650 before a stop took the queue


def test_a_stopping_sender_s_flush_goes_past_the_shard_s_limiter(
    context: zmq.Context, tmp_path: Path
) -> None:
    """A final flush (an actor stopping) asks the shard to take its batches past the
    limiter: with the learner stopping too, nothing might ever sample them."""
    shard, client = held_back_batches(context, tmp_path)
    try:
        assert info(context, shard)["size"] < 800
        assert client.flush(30)
        assert client.delivery()["unconfirmed"] == 0
        assert info(context, shard)["size"] == 800
    finally:
        client.close(0)
        assert shard.stop() == 0


@pytest.mark.slow
def test_a_shard_stopped_with_its_senders_takes_their_flush_before_it_goes(
    context: zmq.Context, tmp_path: Path
) -> None:
    """Under Slurm a job's steps are signalled at once: the shard is told to stop while
    an actor flushes batches its limiter held back (a flush that is not final, so only
    the stop lifts the limiter). It serves on until no insert came for a moment, and its
    final snapshot holds every batch (with no grace it held 650 of the 1,000)."""
    shard, client = held_back_batches(context, tmp_path, batches=20)
    try:
        flushed: list[bool] = []
        flushing = threading.Thread(target=lambda: flushed.append(client.flush(30, final=False)))
        flushing.start()
        shard.process.send_signal(signal.SIGTERM)
        flushing.join(40)
        assert flushed == [True], client.delivery()
        assert shard.process.wait(STOP_TIMEOUT_S) == 0
    finally:
        shard.stop()
        client.close(0)
    assert final_snapshot_size(tmp_path) == 1000


@pytest.mark.slow
def test_batches_a_killed_shard_never_took_reach_its_successor(tmp_path: Path) -> None:
    """The shard is stopped (SIGSTOP) after a snapshot, batches pile up in its socket
    buffers, then it is killed: they die with it. The client kept them and sends them to
    the shard that comes back from the snapshot; the store ends with every batch once."""
    shard = ShardProcess("--capacity", "10000", "--snapshot-dir", str(tmp_path))
    context = zmq.Context()
    client = InsertClient(
        context, [shard.endpoints], sender=5, spec=SMALL_SPEC, timeout_s=2, credit=32
    )
    ports = [e.rsplit(":", 1)[1] for e in (shard.endpoints.insert, shard.endpoints.request)]
    try:
        for i in range(10):
            client.insert(make_batch(SMALL_SPEC, 50, i * 50), np.ones(50))
        assert client.flush(10)
        requests = RequestClient(context, shard.endpoints.request, 99)
        requests.snapshot()
        requests.close()
        wait_for(
            lambda: info(context, shard).get("snapshots_written", 0) >= 1,
            timeout_s=30,
            what="a snapshot",
        )
        shard.process.send_signal(signal.SIGSTOP)
        for i in range(10, 25):  # within the credit: none waits
            client.insert(make_batch(SMALL_SPEC, 50, i * 50), np.ones(50))
        assert client.delivery()["unconfirmed_messages"] == 15
        assert client.delivery()["unconfirmed"] == 15 * 50
        shard.process.send_signal(signal.SIGKILL)
        shard.process.wait(10)
        shard.stop()
        shard = ShardProcess(
            "--capacity",
            "10000",
            "--insert-port",
            ports[0],
            "--request-port",
            ports[1],
            "--restore",
            str(tmp_path),
        )
        assert client.flush(30), client.delivery()
        counters = info(context, shard)
        assert counters["size"] == 25 * 50
        assert counters["lost_at_restart"] == 0
        delivery = client.delivery()
        assert delivery["shard_restarts_seen"] == 1 and delivery["resent"] >= 15
        assert delivery["unconfirmed"] == 0
    finally:
        client.close(linger_s=0)
        shard.stop()
        context.term()


@pytest.mark.slow
def test_a_shard_that_never_comes_back_is_given_up_and_its_batches_go_to_another() -> None:
    """Shard 1 stops answering (SIGSTOP, then kill -9) with batches unconfirmed; the client
    gives it up while shard 0 answers, and shard 0 ends with every batch shard 1 lacked."""
    shards = ShardProcess.start_all(("--capacity", "10000"), ("--capacity", "10000"))
    context = zmq.Context()
    # A shard only slow past reroute_after_s is given up too, and what it had stored of
    # the batches rerouted is then stored twice (InsertClient's at-least-once): on two
    # loaded cores a shard once went 3 s without an answer before the stop, and shard 0
    # ended with 5 batches more than expected. 8 s leaves that to a shard really gone.
    client = InsertClient(
        context,
        [s.endpoints for s in shards],
        sender=6,
        spec=SMALL_SPEC,
        timeout_s=0.5,
        credit=32,
        reroute_after_s=8.0,
    )
    try:
        for i in range(10):
            client.insert(make_batch(SMALL_SPEC, 50, i * 50), np.ones(50))
        assert client.flush(10)
        assert client.lane_resets() == [0, 0], "a shard given up before the stop"
        held_by_stopped = info(context, shards[1])["size"]
        shards[1].process.send_signal(signal.SIGSTOP)
        for i in range(10, 40):  # more than shard 0's share: some wait for the reroute
            client.insert(make_batch(SMALL_SPEC, 50, i * 50), np.ones(50))
        shards[1].process.send_signal(signal.SIGKILL)
        assert client.flush(30), client.delivery()
        delivery = client.delivery()
        assert delivery["rerouted"] >= 1 and delivery["unconfirmed"] == 0
        assert delivery["abandoned"] == 0
        assert client.lane_resets() == [0, 1]  # shard 0 was never given up
        assert info(context, shards[0])["size"] + held_by_stopped == 40 * 50
        for i in range(40, 50):  # the lane given up takes nothing new
            assert client.insert(make_batch(SMALL_SPEC, 50, i * 50), np.ones(50)) == 0
    finally:
        client.close(linger_s=0)
        for shard in shards:
            shard.stop()
        context.term()


@pytest.mark.slow
def test_a_given_up_shard_that_answers_again_takes_batches_again(
    shard: ShardProcess, context: zmq.Context
) -> None:
    """A shard only cut off (stopped, then resumed) gets a new lane when it answers; the
    rest of its old one went elsewhere."""
    other = ShardProcess("--capacity", "10000")
    client = InsertClient(
        context,
        [other.endpoints, shard.endpoints],
        sender=7,
        spec=SMALL_SPEC,
        timeout_s=0.5,
        credit=8,
        reroute_after_s=1.0,
    )
    try:
        shard.process.send_signal(signal.SIGSTOP)
        try:
            for i in range(20):
                client.insert(make_batch(SMALL_SPEC, 4, i * 4), np.ones(4))

            def given_up() -> bool:
                client.insert(make_batch(SMALL_SPEC, 4), np.ones(4))
                return client.lane_resets()[1] == 1

            wait_for(given_up, what="the shard given up", interval_s=0.05)
            assert client.delivery()["rerouted"] >= 1
        finally:
            shard.process.send_signal(signal.SIGCONT)
        assert client.flush(10), client.delivery()

        def back() -> bool:
            return client.insert(make_batch(SMALL_SPEC, 4), np.ones(4)) == 1

        wait_for(back, what="a batch on the shard's new lane", interval_s=0.05)
        assert client.flush(10) and client.delivery()["unconfirmed"] == 0
    finally:
        client.close(linger_s=0)
        other.stop()


def test_the_account_tells_in_transit_from_lost() -> None:
    now = 100.0
    actors = {
        0: ActorStatus(now, transitions_sent=500, unconfirmed=100),  # running: 100 in transit
        1: ActorStatus(now, transitions_sent=500, unconfirmed=20),  # 30 lost at a restart
        2: ActorStatus(now - 60, transitions_sent=500, final=True),  # stopped: all it lacks lost
        3: ActorStatus(now - 60, transitions_sent=500, unconfirmed=100),  # gone: lost
    }
    received = {"0": 400, "1": 450, "2": 490, "3": 450, "4": 520}
    actors[4] = ActorStatus(now, transitions_sent=500, final=True, rerouted=2)
    info = {
        "senders": {a: {"transitions": n} for a, n in received.items()},
        "duplicates_dropped": 3,
        "lost_at_restart": 1,
    }
    report = delivery_report(actors, [info], [], now)
    assert report["transitions_in_transit"] == 100 + 20
    assert report["transitions_lost"] == 30 + 10 + 50
    assert report["actors_gone"] == [3]  # a stopped actor is not gone
    # Actor 4 rerouted batches off a shard that came back with some of them.
    assert (report["transitions_stored_twice"], report["rerouted_batches"]) == (20, 2)
    assert (report["duplicates_dropped"], report["batches_lost_at_shard_restart"]) == (3, 1)


def test_a_restarted_actor_counts_both_lives(context: zmq.Context) -> None:
    collector = EpisodeCollector(context)
    lives = [EpisodeReporter(context, collector.endpoint, sender=3) for _ in range(2)]
    try:
        lives[0].report([], [], 0, 700)  # then killed: its count stays
        lives[1].report([], [], 0, 200, {"unconfirmed": 50})
        lives[1].report([1.0], [9], 0, 250, {"unconfirmed": 20})

        def heard() -> int:
            collector.drain()
            return collector.actors.get(3, ActorStatus(0)).transitions_sent

        wait_for(lambda: heard() == 950, what="both lives heard", interval_s=0.02)
        assert collector.actors[3].unconfirmed == 20
    finally:
        for reporter in lives:
            reporter.close(0)
        collector.close()


def test_the_shard_window_is_shared_among_active_senders() -> None:
    answers = []
    desk = CreditDesk(SenderBook(0), lambda identity, message: answers.append(message), 0)
    for sender in range(4):
        desk.ask(b"x", Message(Kind.CREDIT, sender, 0, count=0, incarnation=9))
    windows = [CreditReply.from_message(m).window for m in answers]
    assert windows == [SHARED_WINDOW // n for n in (1, 2, 3, 4)]


def test_a_queue_shard_grants_no_window_beyond_a_sender_s_own_share() -> None:
    # In flight beyond IMPALA's queue is policy lag: each sender keeps its insert_credit.
    answers = []
    desk = CreditDesk(
        SenderBook(0), lambda identity, message: answers.append(message), 0, widen=False
    )
    desk.ask(b"x", Message(Kind.CREDIT, 1, 0, count=0, incarnation=9))
    assert CreditReply.from_message(answers[0]).window == 0


def test_the_shard_window_is_counted_in_bytes() -> None:
    # Small messages: as many as the bytes allow, up to the most; large ones: the least.
    assert shared_window(0) == SHARED_WINDOW  # nothing taken yet
    assert shared_window(SHARED_WINDOW_BYTES // 100) == 100
    assert shared_window(100) == MAX_WINDOW
    assert shared_window(SHARED_WINDOW_BYTES) == SHARED_WINDOW
    senders = SenderBook(0)
    answers = []
    desk = CreditDesk(senders, lambda identity, message: answers.append(message), 0)
    small, large = senders.get(1), senders.get(2)
    small.taken, small.taken_bytes = 10, 10 * 6_000
    large.taken, large.taken_bytes = 10, 10 * 200_000
    for sender in (1, 2):
        desk.ask(b"x", Message(Kind.CREDIT, sender, 0, count=0, incarnation=9))
    windows = [CreditReply.from_message(m).window for m in answers]
    assert windows == [SHARED_WINDOW_BYTES // 6_000, SHARED_WINDOW // 2]
