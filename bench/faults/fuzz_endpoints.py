"""Descriptor-level fuzz of every socket that decodes anything (``bench.faults.fuzz_descriptors``).

Four endpoints, each sent ``messages`` messages made at the descriptor level from valid
templates of what it carries and from scratch:

* a live shard's insert (PULL) and request (ROUTER) sockets, in its own process (the
  ``apex replay`` of ``bench.faults.fuzz_suite``); the shard must stay up, and its counters must
  account for every message: taken, and then stored, refused as a duplicate or gap, or
  rejected (inserts); counted as a request or rejected (requests). Its priority updates
  reach the edges (``_updates_at_limits``), and afterwards every sampled row must be a
  written one (``audit_store``);
* the learner's episode socket (``apex.channels.EpisodeCollector`` on real TCP), where
  every message must be received and then taken or rejected;
* an actor's weights subscription (``apex.weights.WeightSubscriber`` fed by a hostile
  publisher on loopback), one message in flight at a time so that none is dropped by
  PUB/SUB: each must be received and then loaded, rejected, or stale.

The two apex endpoints run their real classes in this process, the same code the learner
and actor processes run; an exception out of them ends the fuzz as it would end a role.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
import zmq

from apex.algorithms.policy import NumpyDuelingMLP
from apex.channels import ACTOR_COUNTS, ApexKind, EpisodeCollector
from apex.weights import WeightSubscriber
from bench.faults.fuzz_descriptors import RngDraws, descriptor_message
from replay.protocol import messages as replay_messages
from replay.protocol.requests import RequestClient
from replay.store.spec import TransitionSpec
from replay.wire.layout import Kind, Message
from replay.wire.text import text_array
from replay.wire.transport import bind, make_socket, send_frames

SETTLE_TIMEOUT_S = 120.0
ARRIVAL_TIMEOUT_MS = 2000
EPISODE_CHUNK = 500  # below the collector's receive HWM: a chunk is never dropped
INSERT_KINDS = [int(Kind.INSERT), int(Kind.INSERT_FRAMES)]
REQUEST_KINDS = [
    int(k) for k in (Kind.SAMPLE, Kind.UPDATE, Kind.INFO, Kind.SPEC, Kind.CREDIT, Kind.SNAPSHOT)
]
APEX_KINDS = [int(k) for k in ApexKind]
AUDIT_SAMPLES, AUDIT_BATCH = 16, 1024


def settle(client: RequestClient, condition: Callable[[dict], bool], what: str) -> dict:
    """The shard's INFO once ``condition`` holds of it (its queues drained)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        info = client.info()
        if condition(info):
            return info
    raise TimeoutError(f"the shard did not settle ({what}) within {SETTLE_TIMEOUT_S} s")


def _insert_totals(info: dict, learner: int) -> dict[str, int]:
    senders = [s for key, s in info["senders"].items() if key != str(learner)]
    return {
        "taken": sum(s["insert_messages_taken"] for s in senders),
        "inserts": sum(s["inserts"] for s in senders),
        "requests": sum(s["requests"] for s in senders),
        "settled": info["rejected_total"]
        + info["duplicates_dropped"]
        + info["out_of_order_refused"],
        "protocol": info["rejected"].get("protocol", 0),
    }


def fuzz_shard(
    insert_endpoint: str,
    request_endpoint: str,
    spec: TransitionSpec,
    context: zmq.Context,
    rng: np.random.Generator,
    messages: int,
    learner: int,
) -> dict:
    """Descriptor-level messages to both of a live shard's sockets; what it counted."""
    draws = RngDraws(rng)
    client = RequestClient(context, request_endpoint, sender=learner, timeout_s=10.0)
    batch = {name: np.zeros((4, *f.shape), f.dtype) for name, f in spec.items()}
    insert_templates = [
        replay_messages.Insert(batch, np.ones(4)).to_message(spec, sender, 0, 0)
        for sender in (1, 2, 2**32 - 1)
    ]
    slots = np.arange(4, dtype=np.int64)
    start = client.info()
    size, capacity = int(start["size"]), int(start["capacity"])
    request_templates = [
        replay_messages.SampleRequest(4, 0.4).to_message(3, 0),
        replay_messages.SampleRequest(1, 0.0).to_message(3, 0),
        replay_messages.SampleRequest(512, 1.0).to_message(3, 0),
        replay_messages.PriorityUpdate(slots, slots, np.ones(4)).to_message(3, 0),
        *[
            replay_messages.PriorityUpdate(*update).to_message(3, 0)
            for update in _updates_at_limits(size, capacity)
        ],
        replay_messages.CreditRequest(1, 10).to_message(3, 0),
        replay_messages.request(Kind.INFO, 3, 0),
        replay_messages.request(Kind.SPEC, 3, 0),
    ]
    before = _insert_totals(client.info(), learner)
    pusher = make_socket(context, zmq.PUSH, hwm=256)
    pusher.connect(insert_endpoint)
    started = time.monotonic()
    for _ in range(messages):
        send_frames(pusher, descriptor_message(draws, INSERT_KINDS, insert_templates))
    middle = _insert_totals(
        settle(
            client,
            lambda i: _insert_totals(i, learner)["taken"] - before["taken"] >= messages,
            "every insert message taken",
        ),
        learner,
    )
    insert_seconds = time.monotonic() - started

    dealer = make_socket(context, zmq.DEALER, hwm=1024)
    dealer.connect(request_endpoint)
    replies = 0
    started = time.monotonic()
    for _ in range(messages):
        send_frames(dealer, descriptor_message(draws, REQUEST_KINDS, request_templates))
        while dealer.poll(0):
            dealer.recv_multipart()
            replies += 1

    def counted(info: dict) -> int:
        totals = _insert_totals(info, learner)
        return totals["requests"] - middle["requests"] + totals["protocol"] - middle["protocol"]

    end_info = settle(client, lambda i: counted(i) >= messages, "every request counted")
    request_seconds = time.monotonic() - started
    rows_checked, bad_rows, total_is_size = audit_store(client, spec, end_info)
    for socket in (pusher, dealer):
        socket.close(linger=0)
    client.close()
    inserts = middle["inserts"] - before["inserts"]
    refused = middle["settled"] - before["settled"]
    return {
        "insert_messages": messages,
        "insert_messages_taken": middle["taken"] - before["taken"],
        "inserts_stored": inserts,
        "inserts_refused": refused,
        "insert_messages_per_s": messages / insert_seconds,
        "request_messages": messages,
        "requests_counted": counted(end_info),
        "request_messages_per_s": messages / request_seconds,
        "replies_read": replies,
        "rows_checked": rows_checked,
        "bad_rows_served": bad_rows,
        "checks": {
            "descriptor_fuzz_serves_no_bad_row": bad_rows == 0 and rows_checked > 0,
            "descriptor_fuzz_keeps_size": end_info["size"] == end_info["transitions_added"],
            "descriptor_fuzz_leaves_no_priority_on_empty_slots": total_is_size,
            "descriptor_inserts_all_taken": middle["taken"] - before["taken"] == messages,
            "descriptor_inserts_all_accounted": inserts + refused == messages,
            "descriptor_requests_all_counted": counted(end_info) == messages,
            "shard_answers_after_descriptor_fuzz": end_info["size"] >= 0,
        },
    }


def _updates_at_limits(size: int, capacity: int) -> list[tuple[np.ndarray, ...]]:
    """UPDATE contents at the edges of what a shard holds: empty slots at generation -1
    (their sentinel), slots past the capacity, generations past the newest item, and
    priorities NaN, infinite, negative and zero on written slots."""
    written = np.arange(min(size, 4), dtype=np.int64)
    # The store's last slots: the descriptors' own inserts never reach them.
    empty = np.arange(max(size, capacity - 64), capacity, dtype=np.int64)
    beyond = np.arange(capacity, capacity + 4, dtype=np.int64)
    edges = np.array([np.nan, np.inf, -1.0, 0.0])[: written.size]
    return [
        (empty, np.full(empty.size, -1, np.int64), np.full(empty.size, 1e6)),
        (beyond, beyond.copy(), np.ones(beyond.size)),
        (written, written + 10**9, np.full(written.size, 1e6)),
        (written, written.copy(), edges),
    ]


def written_rows(sample, size: int) -> np.ndarray:
    """Per sampled row, whether it is a slot the fuzzed store has written (below
    ``size``) at its own generation (the store never wraps: slot ``s`` holds item ``s``),
    with an importance weight in [0, 1] (a huge priority a descriptor legitimately wrote
    underflows the others' to 0)."""
    good = (sample.indices >= 0) & (sample.indices < size)
    good &= sample.generations == sample.indices
    return good & (sample.weights >= 0) & (sample.weights <= 1)


def audit_store(client: RequestClient, spec: TransitionSpec, info: dict) -> tuple[int, int, bool]:
    """Checks what a shard serves after a descriptor fuzz. Every written slot is first
    given priority 1 again (the fuzz's own updates may have put one huge priority where
    every draw lands): the total must then be the size exactly, or some slot that holds
    nothing has priority. Then each sampled row is checked: a written row
    (:func:`written_rows`) with finite fields. Returns (rows checked, bad rows, whether
    the total was the size)."""
    size = int(info["size"])
    for first in range(0, size, AUDIT_BATCH):
        slots = np.arange(first, min(first + AUDIT_BATCH, size), dtype=np.int64)
        client.update(slots, slots, np.ones(slots.size))
    total = client.info()["total_priority"]  # answered after the updates: one connection
    checked = bad = 0
    for _ in range(AUDIT_SAMPLES):
        sample = client.sample(AUDIT_BATCH, 0.4, spec)
        good = written_rows(sample, size)
        for name, field in spec.items():
            if field.dtype.kind == "f":
                good &= np.isfinite(sample.fields[name].reshape(AUDIT_BATCH, -1)).all(axis=1)
        checked += AUDIT_BATCH
        bad += int((~good).sum())
    return checked, bad, abs(total - size) <= 1e-9 * size


def fuzz_episode_socket(context: zmq.Context, rng: np.random.Generator, messages: int) -> dict:
    """Descriptor-level messages to a learner's episode collector over TCP."""
    draws = RngDraws(rng)
    collector = EpisodeCollector(context)
    pusher = make_socket(context, zmq.PUSH, hwm=EPISODE_CHUNK)
    pusher.connect(collector.endpoint)
    counts = np.zeros(len(ACTOR_COUNTS), np.int64)
    episodes = (np.ones(2), np.array([10, 20]), counts, np.zeros(0, np.uint8))
    templates = [
        Message(ApexKind.EPISODES, sender, 0, 3, 2, 100.0, episodes, incarnation=7)
        for sender in (0, 5)
    ]
    started = time.monotonic()
    sent = 0
    try:
        while sent < messages:
            chunk = min(EPISODE_CHUNK, messages - sent)
            for _ in range(chunk):
                send_frames(pusher, descriptor_message(draws, APEX_KINDS, templates))
            sent += chunk
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while collector.received < sent and time.monotonic() < deadline:
                collector.drain()
        seconds = time.monotonic() - started
        return {
            "messages": messages,
            "received": collector.received,
            "taken": collector.reports,
            "rejected": collector.rejected,
            "messages_per_s": messages / seconds,
            "checks": {
                "episode_messages_all_received": collector.received == messages,
                "episode_messages_all_accounted": collector.reports + collector.rejected
                == messages,
            },
        }
    finally:
        pusher.close(linger=0)
        collector.close()


def fuzz_weight_subscription(context: zmq.Context, rng: np.random.Generator, messages: int) -> dict:
    """Descriptor-level messages from a hostile publisher to an actor's subscription."""
    draws = RngDraws(rng)
    policy = NumpyDuelingMLP(4, 2, (8,), seed=0)
    shapes = policy.parameter_shapes()
    arrays = [text_array(json.dumps(list(shapes)))]
    arrays += [np.ones(shape, np.float32) for shape in shapes.values()]
    templates = [Message(ApexKind.WEIGHTS, 0, 0, 5, 0, 0.0, tuple(arrays))]
    publisher = make_socket(context, zmq.PUB, hwm=1000)
    endpoint = bind(publisher, "127.0.0.1", 0)
    subscriber = WeightSubscriber(context, endpoint)
    try:
        # PUB/SUB's slow joiner: a probe until the subscription is in place (then not counted).
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        probe = descriptor_message(draws, APEX_KINDS, [])
        while not subscriber.received and time.monotonic() < deadline:
            send_frames(publisher, probe)
            subscriber.poll(policy, timeout_ms=10)
        keys = ("received", "loaded", "rejected", "stale", "superseded", "ends")
        base = {key: getattr(subscriber, key) for key in keys}
        started, lost = time.monotonic(), 0
        for _ in range(messages):
            expected = subscriber.received + 1
            send_frames(publisher, descriptor_message(draws, APEX_KINDS, templates))
            arrival = time.monotonic() + ARRIVAL_TIMEOUT_MS / 1000
            while subscriber.received < expected and time.monotonic() < arrival:
                subscriber.poll(policy, timeout_ms=ARRIVAL_TIMEOUT_MS)
            lost += subscriber.received < expected
            # Every message's parse is what is fuzzed: the version rule (only newer weights
            # load) is tested on its own, so a forged huge version must not end the fuzz.
            subscriber.version = -1
        seconds = time.monotonic() - started
        counts = {key: getattr(subscriber, key) - value for key, value in base.items()}
        return {
            "messages": messages,
            **counts,
            "lost_in_transit": lost,
            "messages_per_s": messages / seconds,
            "checks": {
                "weight_messages_all_received": counts["received"] == messages and not lost,
                "weight_messages_all_accounted": sum(
                    counts[key] for key in ("loaded", "rejected", "stale", "superseded", "ends")
                )
                == counts["received"],
            },
        }
    finally:
        subscriber.close()
        publisher.close(linger=0)
