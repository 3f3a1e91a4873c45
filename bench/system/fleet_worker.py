"""One process of a synthetic fleet (``bench.system.fleet_suite``): many logical actors, each an
:class:`replay.inserts.client.InsertClient` of its own (its own sockets, credit and delivery lanes,
as a real actor has), sending recorded transitions at a fixed per-actor rate. No envs, no
network: what is left is the cost of the fleet to the shards and the learner.

``python -m bench.system.fleet_worker '<json>'`` with ``shards`` ([[insert, request], ...]),
``spec`` (the transition spec as a dict), ``recording`` (an ``.npz`` of transitions, read
without pickle), ``first_sender``, ``actors``, ``rate`` (transitions/s per actor), ``batch``
(transitions per message) and ``seconds``. Prints one JSON line: what it sent, how late
its sends ran, how often no shard had room, and what was still unconfirmed at the end.
"""

from __future__ import annotations

import heapq
import json
import sys
import threading
import time

import numpy as np
import zmq

from replay.errors import ReplayTimeout
from replay.inserts.client import InsertClient
from replay.inserts.endpoints import ShardEndpoints
from replay.store.spec import TransitionSpec

# A send with no shard room waits at most this long, then the actor tries again later (a
# real actor would wait; here one blocked actor must not hold up the others).
INSERT_TIMEOUT_S = 0.02
RETRY_S = 0.05
FLUSH_TIMEOUT_S = 30.0
FLUSH_TURN_S = 0.01


def run(params: dict) -> dict:
    spec = TransitionSpec.from_dict({k: tuple(v) for k, v in params["spec"].items()})
    with np.load(params["recording"], allow_pickle=False) as stored:
        recording = {name: stored[name] for name in spec.to_dict()}
    recorded = len(next(iter(recording.values())))
    batch, actors = params["batch"], params["actors"]
    interval = batch / params["rate"]
    shards = [ShardEndpoints(*pair) for pair in params["shards"]]
    context = zmq.Context()
    context.max_sockets = 8 * actors * len(shards) + 64
    clients = [
        InsertClient(
            context,
            shards,
            sender=params["first_sender"] + i,
            spec=spec,
            timeout_s=INSERT_TIMEOUT_S,
            start_timeout_s=params["start_timeout_s"],
            batch_hint=batch,
        )
        for i in range(actors)
    ]
    priorities = np.ones(batch)
    print(json.dumps({"sending": True}), flush=True)  # its clients are up: the window opens
    cpu_started = time.process_time()
    started = time.monotonic()
    end = started + params["seconds"]
    # Staggered: actor i sends first at i/actors of an interval, then every interval.
    due = [(started + interval * i / actors, i) for i in range(actors)]
    heapq.heapify(due)
    offsets = np.random.default_rng(params["first_sender"]).integers(0, recorded, actors)
    pause = threading.Event()
    sent = messages = waits = 0
    lateness: list[float] = []
    while due and due[0][0] < end:
        when, actor = heapq.heappop(due)
        now = time.monotonic()
        if when > now:
            pause.wait(when - now)
        start = int(offsets[actor]) % (recorded - batch)
        chunk = {name: values[start : start + batch] for name, values in recording.items()}
        try:
            clients[actor].insert(chunk, priorities)
        except ReplayTimeout:
            waits += 1
            heapq.heappush(due, (time.monotonic() + RETRY_S, actor))
            continue
        lateness.append(max(0.0, time.monotonic() - when))
        offsets[actor] += batch
        sent += batch
        messages += 1
        heapq.heappush(due, (when + interval, actor))
    elapsed = time.monotonic() - started
    cpu_s = time.process_time() - cpu_started
    print(json.dumps({"sent": True}), flush=True)  # the window closes; the flush follows
    # All clients flush at once, in short turns: one after another, each with what is
    # left of the deadline, the last of 128 had no time left to hear back.
    flush_end = time.monotonic() + FLUSH_TIMEOUT_S
    waiting = list(clients)
    while waiting and time.monotonic() < flush_end:
        waiting = [client for client in waiting if not client.flush(FLUSH_TURN_S)]
    unconfirmed = sum(client.delivery()["unconfirmed"] for client in clients)
    for client in clients:
        client.close(linger_s=1.0)
    context.term()
    late = np.array(lateness or [0.0])
    return {
        "transitions_sent": sent,
        "messages_sent": messages,
        "seconds": elapsed,
        "no_room": waits,
        "unconfirmed_after_flush": unconfirmed,
        "late_p50_s": float(np.percentile(late, 50)),
        "late_p99_s": float(np.percentile(late, 99)),
        "late_max_s": float(late.max()),
        "cpu_s": cpu_s,
    }


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
