"""Unit costs for the cost model (``bench.system.cost_model``), measured on this machine with the
real parts: a whole actor process, insert clients, and a live shard process over TCP.

Each cost is CPU time (``time.process_time`` here, ``/proc`` for the shard) over a window
of work at a rate the shard keeps up with, so it is the cost of the work, not of waiting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zmq

from bench.parts.sample_service import fill_shards
from bench.parts.shard_processes import INSERT_BATCH, message_nbytes, start_pusher, start_shard
from bench.parts.shard_worker import transition_spec
from bench.system.cotenant import learner_network as network_of
from bench.system.cotenant import learner_on_core
from bench.system.fleet_suite import FleetRun, start_worker
from bench.system.recordings import record
from bench.workers import REPO_ROOT, worker_env
from launch.supervision.processes import cpu_seconds
from launch.supervision.role_process import stop_all
from replay.inserts.client import InsertClient
from replay.inserts.endpoints import ShardEndpoints
from replay.protocol.requests import RequestClient

# Per env: the acting loop's network, the shard kind that stores it, and two env counts
# per actor process (the per-step cost is a fixed part per vector step plus a part per env).
ENVS = {
    "CartPole-v1": {"hidden": (256, 256), "kind": "small", "counts": (1, 16), "rate": 20_000},
    "Pong": {"hidden": (256,), "kind": "atari-frames", "counts": (1, 4), "rate": 4_000},
}
SAMPLE_SIZES = (32, 256)
# A learner's step between batches: about 300 updates/s, the CPU learner's rate here.
LEARNER_STEP_S = 0.003
IDLE_CLIENTS = 256
ENVS_BY_KIND = {spec["kind"]: spec["rate"] for spec in ENVS.values()}
_CORES = sorted(os.sched_getaffinity(0))
SHARD_CORE, CLIENT_CORE = _CORES[-1], _CORES[0]


def _taken(info: dict, counter: str) -> int:
    """A shard's per-sender ``counter`` summed over its senders (a request-only client
    adds nothing to ``transitions`` or ``insert_messages_taken``)."""
    return sum(sender[counter] for sender in info["senders"].values())


def learner_network(env: str):
    """The torch network the learner of ``env`` trains and publishes (its widths here)."""
    return network_of(env, ENVS[env]["hidden"])


def actor_process_cost(env: str, envs: int, seconds: float, shared: bool = False) -> float:
    """CPU seconds per env step of a real actor process (``apex actor``: acting, initial
    priorities, weights loads, episode reports, its insert client) into a live shard,
    with weights published as a learner of 280 updates/s publishing every 10 would. The
    actor runs on a core of its own, or ``shared`` with a learner's training loop."""
    import torch

    from apex.channels import EpisodeCollector
    from apex.weights import WeightPublisher

    context = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="apex-model-") as directory:
        run = FleetRun(
            Path(directory), env, 1, frames=ENVS[env]["kind"] == "atari-frames", envs=envs
        )
        publisher = WeightPublisher(context)
        collector = EpisodeCollector(context)
        network = learner_network(env)
        command = [
            sys.executable,
            "-m",
            "launch",
            "actor",
            "--config",
            str(run.config_path),
            "--index",
            "0",
            "--shard",
            ",".join(run.endpoints[0]),
            "--weights",
            publisher.endpoint,
            "--episodes",
            collector.endpoint,
        ]
        actor = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=worker_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # The actor on a core of its own (or shared), everything measuring it on the other.
        os.sched_setaffinity(actor.pid, {SHARD_CORE})
        for process in run.processes:
            os.sched_setaffinity(process.pid, {CLIENT_CORE})
        affinity = os.sched_getaffinity(0)
        cotenant = learner_on_core(env, ENVS[env]["hidden"], SHARD_CORE, shared)
        client = RequestClient(context, run.endpoints[0][1], sender=90_000, timeout_s=30)
        version = [0]

        def transitions_in() -> int:
            return _taken(client.info(), "transitions")

        def serve_until(done: Callable[[], bool], timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while not done():
                if time.monotonic() > deadline or actor.poll() is not None:
                    raise TimeoutError(f"the {env} actor did not send in time")
                version[0] += 1
                publisher.publish(network, version[0])
                collector.drain()
                time.sleep(1 / 28)

        try:
            os.sched_setaffinity(0, {CLIENT_CORE})
            with torch.no_grad(), cotenant:
                serve_until(lambda: transitions_in() > 500, 120)
                cpu, sent = cpu_seconds(actor.pid) or 0.0, transitions_in()
                end = time.monotonic() + seconds
                serve_until(lambda: time.monotonic() >= end, seconds + 30)
                cpu = (cpu_seconds(actor.pid) or 0.0) - cpu
                sent = transitions_in() - sent
        finally:
            os.sched_setaffinity(0, affinity)
            actor.terminate()
            actor.wait(30)
            client.close()
            publisher.close()
            collector.close()
            run.stop()
            context.destroy(linger=0)
    return cpu / sent


def shared_factor(beside: float, own: float) -> float:
    """How much more an operation costs beside a learner than on a core of its own (an actor
    step, a shard's message or request, a client's message); 1 (no difference measured)
    when either cost was lost in a short window's noise (0 once idle CPU is taken off),
    where a ratio would divide by zero or say the operation costs nothing beside a
    learner (seen in a 1 s window on a loaded 2-core machine)."""
    return beside / own if own > 0 and beside > 0 else 1.0


def actor_step_costs(env: str, seconds: float) -> dict:
    """Per vector step and per env step CPU seconds of an actor process on a core of its
    own, from two env counts (``c(k) = per_vector / k + per_env``), and how much more a
    step costs on a core shared with a learner (the mean ratio over the two counts)."""
    counts = ENVS[env]["counts"]
    own = [actor_process_cost(env, k, seconds) for k in counts]
    shared = [actor_process_cost(env, k, seconds, shared=True) for k in counts]
    (k1, k2), (c1, c2) = counts, own
    per_vector = max(0.0, (c1 - c2) / (1 / k1 - 1 / k2))
    factors = [shared_factor(beside, alone) for beside, alone in zip(shared, own, strict=True)]
    return {
        "per_vector_step_s": per_vector,
        "per_env_step_s": max(0.0, c1 - per_vector / k1),
        "actor_shared_factor": sum(factors) / len(factors),
    }


def fleet_message_costs(seconds: float, shared: bool = False) -> dict:
    """Many actors each sending at the Ape-X paper's rate, as in a cluster: every message
    then comes with a credit question. CPU of the clients (a fleet worker, niced as in
    ``bench fleet``, on a core of its own or ``shared`` with a learner's training loop)
    and of the shard (on the other core) over a window."""
    actors = 128
    with tempfile.TemporaryDirectory(prefix="apex-model-fleet-") as directory:
        recording = record("CartPole-v1", 2_000, Path(directory) / "recording.npz")
        run = FleetRun(Path(directory), "CartPole-v1", 1)
        context = zmq.Context()
        client = RequestClient(context, run.endpoints[0][1], sender=90_000, timeout_s=30)
        cotenant = learner_on_core(
            "CartPole-v1", ENVS["CartPole-v1"]["hidden"], CLIENT_CORE, shared
        )
        try:
            worker = start_worker(run, recording, 0, actors, seconds + 3)
            os.sched_setaffinity(worker.pid, {CLIENT_CORE})
            for process in run.processes:
                os.sched_setaffinity(process.pid, {SHARD_CORE})
            with cotenant:
                worker.stdout.readline()  # sending
                time.sleep(1.5)  # past the staggered first sends
                shard = run.processes[0].pid
                shard_cpu = cpu_seconds(shard) or 0.0
                client_cpu = cpu_seconds(worker.pid) or 0.0
                taken = _taken(client.info(), "insert_messages_taken")
                time.sleep(seconds)
                messages = _taken(client.info(), "insert_messages_taken") - taken
                shard_cpu = (cpu_seconds(shard) or 0.0) - shard_cpu
                client_cpu = (cpu_seconds(worker.pid) or 0.0) - client_cpu
            worker.communicate(timeout=120)
        finally:
            client.close()
            context.destroy(linger=0)
            run.stop()
    return {
        "messages": messages,
        "connections": 2 * actors,
        "seconds": seconds,
        "shard_cpu": shard_cpu,
        "client_cpu": client_cpu,
    }


class _ShardWindow:
    """One live shard process, on a core of its own (this process and the pushers on
    another), and what it did over a window: CPU and messages taken."""

    def __init__(self, kind: str, capacity: int) -> None:
        self.process, self.ready = start_shard(kind, capacity)
        os.sched_setaffinity(self.process.pid, {SHARD_CORE})
        self._affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {CLIENT_CORE})
        self.context = zmq.Context()
        self.requests = RequestClient(self.context, self.ready["request"], sender=90, timeout_s=30)

    def counters(self) -> tuple[float, int, int]:
        info = self.requests.info()
        messages = _taken(info, "insert_messages_taken")
        return cpu_seconds(self.process.pid) or 0.0, messages, info["size"]

    def cpu_over(self, seconds: float, work: Callable[[], None] | None = None) -> float:
        """Shard CPU seconds over ``seconds`` (doing ``work`` meanwhile, if given)."""
        before = cpu_seconds(self.process.pid) or 0.0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if work is None:
                self.requests.socket.poll(50)
            else:
                work()
        return (cpu_seconds(self.process.pid) or 0.0) - before

    def close(self) -> None:
        self.requests.close()
        self.context.destroy(linger=0)
        stop_all([self.process])
        os.sched_setaffinity(0, self._affinity)


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)


_MIN_MESSAGES, _MAX_WINDOW_S = 20, 30.0


def _insert_costs(shard: _ShardWindow, kind: str, seconds: float, idle: float) -> tuple:
    """Shard and client CPU per insert message, from a paced client in its own process."""
    # The pusher runs until stopped here; its own limit only guards against a leaked process.
    pusher = start_pusher("apex", kind, 1, [shard.ready], 600, rate=ENVS_BY_KIND[kind])
    try:
        os.sched_setaffinity(pusher.pid, {CLIENT_CORE})
        _wait(lambda: shard.counters()[1] > 10, 60, "the pusher's first messages")
        cpu_before, messages_before, _ = shard.counters()
        client_before, started = cpu_seconds(pusher.pid) or 0.0, time.monotonic()
        # A window on a busy machine can pass with the pusher descheduled: the window
        # grows until enough messages arrived to divide by, within a bound.
        while True:
            shard.cpu_over(seconds)
            cpu_after, messages_after, _ = shard.counters()
            elapsed = time.monotonic() - started
            if messages_after - messages_before >= _MIN_MESSAGES or elapsed > _MAX_WINDOW_S:
                break
        client_after = cpu_seconds(pusher.pid) or 0.0
    finally:
        stop_all([pusher])
    messages = messages_after - messages_before
    if messages <= 0:
        raise RuntimeError(f"no insert message reached the shard in {elapsed:.1f} s")
    # The shard's idle CPU subtracted can exceed a short window's busy CPU: noise, not a
    # negative cost.
    return (
        max(0.0, cpu_after - cpu_before - idle * elapsed) / messages,
        (client_after - client_before) / messages,
    )


def shard_costs(env: str, seconds: float) -> dict:
    """A shard's CPU: idle; per insert message (and the client's) and per sample request of
    k transitions with its priority update, on a core of its own (idle between operations,
    so each pays for waking it); how much more each costs on a core shared with a
    learner's training loop; per connection-second."""
    kind = ENVS[env]["kind"]
    spec = transition_spec("atari" if kind == "atari-frames" else kind)
    shard = _ShardWindow(kind, 200_000)
    try:
        idle = shard.cpu_over(seconds) / seconds
        figures = {}
        for shared in (False, True):
            with learner_on_core(env, ENVS[env]["hidden"], SHARD_CORE, shared):
                per_message, client = _insert_costs(shard, kind, seconds, idle)
                if shard.counters()[2] < 20_000:
                    endpoints = [ShardEndpoints(shard.ready["insert"], shard.ready["request"])]
                    fill_shards(kind, shard.context, endpoints, spec, 20_000)
                figures[shared] = {
                    "per_message_s": per_message,
                    "client_s_per_message": client,
                    **_sample_costs(shard, spec, seconds, idle),
                }
        connections = _connection_cost(shard, spec, seconds, idle)
    finally:
        shard.close()
    own, beside = figures[False], figures[True]
    size = SAMPLE_SIZES[-1]
    request_own = own["per_request_s"] + size * own["per_sampled_s"]
    request_beside = beside["per_request_s"] + size * beside["per_sampled_s"]
    return {
        **own,
        **connections,
        "idle_cores": idle,
        "message_shared_factor": shared_factor(beside["per_message_s"], own["per_message_s"]),
        "request_shared_factor": shared_factor(request_beside, request_own),
    }


def _sample_costs(shard: _ShardWindow, spec, seconds: float, idle: float) -> dict:
    """Fits ``per request + k * per sampled`` from batches of two sizes taken the way a
    learner takes them (the sampler, with prefetch, a training step apart: a shard that
    wakes for each request costs more per request than one serving a queue of them), and
    the reply's bytes per sampled transition."""
    from apex.learning.staging import DeviceStager
    from replay.protocol.messages import SampleRequest
    from replay.sampling.pump import SamplerConfig
    from replay.sampling.sampler import make_sampler

    costs, reply_bytes = {}, {}
    for size in SAMPLE_SIZES:
        config = SamplerConfig(
            endpoints=(shard.ready["request"],), batch_size=size, prefetch=4, sender=91
        )
        with make_sampler(config, spec, DeviceStager("cpu")) as sampler:
            done = []

            def learner_step(sampler=sampler, size: int = size, done: list = done) -> None:
                batch = sampler.next_batch()
                sampler.update_priorities(batch.source, np.ones(size))
                done.append(1)
                time.sleep(LEARNER_STEP_S)

            learner_step()
            cpu = shard.cpu_over(seconds, learner_step)
        costs[size] = (cpu - idle * seconds) / len(done)
        shard.requests.send(SampleRequest(size, 0.4))  # once more, weighed on the wire
        reply_bytes[size] = sum(len(part) for part in shard.requests.socket.recv_multipart())
    (k1, c1), (k2, c2) = sorted(costs.items())
    per_sampled = max(0.0, (c2 - c1) / (k2 - k1))
    (_, b1), (_, b2) = sorted(reply_bytes.items())
    return {
        "per_request_s": max(0.0, c1 - k1 * per_sampled),
        "per_sampled_s": per_sampled,
        "sample_bytes": (b2 - b1) / (k2 - k1),
    }


def _connection_cost(shard: _ShardWindow, spec, seconds: float, idle: float) -> dict:
    """Per connection-second, at the shard and at the clients: idle insert clients (two
    connections each) heartbeating."""
    endpoints = [ShardEndpoints(shard.ready["insert"], shard.ready["request"])]
    context = zmq.Context()
    try:
        clients = [
            InsertClient(context, endpoints, sender=200 + i, spec=spec) for i in range(IDLE_CLIENTS)
        ]
        started = time.process_time()
        cpu = shard.cpu_over(seconds)
        ours = time.process_time() - started
        for client in clients:
            client.close(0)
    finally:
        context.destroy(linger=0)
    connection_seconds = 2 * IDLE_CLIENTS * seconds
    return {
        "per_connection_s": max(0.0, (cpu - idle * seconds) / connection_seconds),
        "client_per_connection_s": ours / connection_seconds,
    }


def wire_bytes(env: str) -> float:
    """Bytes on the wire per transition an actor sends (a message of INSERT_BATCH)."""

    return message_nbytes(ENVS[env]["kind"]) / INSERT_BATCH


def weights_bytes(env: str) -> int:
    """The network's parameters, as the learner publishes them (float32)."""
    return sum(p.numel() * 4 for p in learner_network(env).parameters())


def credit_costs(streaming: dict, seconds: float, progress: Callable[[str], None]) -> dict:
    """What a credit question adds to a message, shard side and client side: a fleet's
    actors ask one per message, a streaming client one per many (``streaming``: the
    CartPole figures of :func:`shard_costs`)."""
    progress("model: a fleet of 128 actors at the paper's rate, alone and beside a learner")
    fleet = fleet_message_costs(seconds)
    beside = fleet_message_costs(seconds, shared=True)
    heartbeats = streaming["per_connection_s"] * fleet["connections"]
    background = (streaming["idle_cores"] + heartbeats) * fleet["seconds"]
    shard_per_message = (fleet["shard_cpu"] - background) / fleet["messages"]
    client_heartbeats = streaming["client_per_connection_s"] * fleet["connections"]
    client_per_message = (fleet["client_cpu"] - client_heartbeats * fleet["seconds"]) / fleet[
        "messages"
    ]
    return {
        "per_credit_s": max(0.0, shard_per_message - streaming["per_message_s"]),
        "client_credit_s": max(0.0, client_per_message - streaming["client_s_per_message"]),
        "client_shared_factor": shared_factor(
            beside["client_cpu"] / beside["messages"], fleet["client_cpu"] / fleet["messages"]
        ),
    }


def measure(envs: list[str], seconds: float, progress: Callable[[str], None] = print) -> dict:
    """Every unit cost of every env in ``envs``, as ``UnitCosts`` fields per env."""
    costs = {}
    for env in envs:
        progress(f"model: {env} actor processes, alone and beside a learner")
        actor = actor_step_costs(env, seconds)
        progress(f"model: {env} shard costs, alone and beside a learner")
        costs[env] = {
            "env": env,
            **actor,
            "transitions_per_message": INSERT_BATCH,
            "wire_bytes": wire_bytes(env),
            "weights_bytes": weights_bytes(env),
            **shard_costs(env, seconds),
        }
    streaming = costs.get("CartPole-v1") or shard_costs("CartPole-v1", seconds)
    credit = credit_costs(streaming, seconds, progress)
    for env in envs:
        costs[env].update(credit)
    return costs


def load_measured(path: Path) -> dict:
    """A benchmark JSON document (``bench.report``)."""
    return json.loads(path.read_text())
