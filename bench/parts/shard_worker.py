"""Helper processes of the shard suite: pushers, and the raw-pyzmq receiver baseline.

``python -m bench.parts.shard_worker '<json>'`` with ``role``:

* ``push``: sends INSERT batches until SIGTERM or ``max_seconds``, at ``rate``
  transitions/s if given. ``mode`` "apex" goes
  through :class:`replay.inserts.client.InsertClient` (spec check, validation, encoding); "raw"
  sends the same pre-encoded frames with a bare PUSH socket. Kind "atari-frames" sends
  frame messages (``FrameSource`` live, or ``RecordedFrames`` into a single shard).
* ``pull``: the baseline receiver. Binds a PULL socket, prints ``{"ready": endpoint}``,
  then counts the messages received in ``repeats`` windows of ``seconds_per_repeat``
  after ``warmup_s``, and prints ``{"rates": [...]}`` (messages/s per window).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable

import numpy as np
import zmq

from bench.workers import random_batch
from replay.errors import ReplayTimeout
from replay.frames.payload import FrameInsert
from replay.inserts.client import InsertClient
from replay.inserts.endpoints import ShardEndpoints
from replay.store.spec import TransitionSpec
from replay.wire.layout import Kind, Message, encode
from replay.wire.security import SecurityConfig, make_context

# Envs per frame pusher, and the n-step of its records (as a Pong actor's).
FRAME_ENVS, FRAME_N = 4, 3


# IMPALA's unrolls at CartPole's sizes, T = 20 (``apex.algorithms.impala.builder``).
UNROLL_STEPS = 20


def sequence_spec() -> TransitionSpec:
    """R2D2's sequences at its paper's sizes (80 steps, an LSTM of 512 units,
    ``apex.algorithms.r2d2``) of a four-float observation: one item of the sum-tree."""
    from apex.algorithms.r2d2.builder import R2D2Builder
    from apex.algorithms.r2d2.settings import R2D2Settings
    from apex.envs.families import EnvShape
    from apex.settings.actor import ActorConfig

    shape = EnvShape((4,), np.dtype("float32"), actions=2)
    return R2D2Builder().transition_spec(shape, ActorConfig(env="CartPole-v1"), R2D2Settings())


def transition_spec(kind: str) -> TransitionSpec:
    if kind == "sequences":
        return sequence_spec()
    if kind == "unrolls":
        steps = UNROLL_STEPS
        return TransitionSpec.from_dict(
            {
                "obs": ((steps + 1, 4), "float32"),
                "action": ((steps,), "int64"),
                "reward": ((steps,), "float32"),
                "discount": ((steps,), "float32"),
                "log_prob": ((steps,), "float32"),
                "version": ((), "int64"),
            }
        )
    obs = ((4,), "float32") if kind == "small" else ((4, 84, 84), "uint8")
    return TransitionSpec.from_dict(
        {
            "obs": obs,
            "action": ((), "int64"),
            "reward": ((), "float32"),
            "discount": ((), "float32"),
            "next_obs": obs,
        }
    )


def make_batch(spec: TransitionSpec, count: int, seed: int) -> dict[str, np.ndarray]:
    batch = random_batch(spec.to_dict(), count, np.random.default_rng(seed))
    if "log_prob" in batch:  # a queue shard takes log-probabilities of at most 0
        batch["log_prob"] = -batch["log_prob"]
    return batch


def push(request: dict) -> None:
    stop = {"flag": False}

    def on_term(signum, frame):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_term)
    if request["kind"] == "atari-frames":
        push_frames(request, stop)
        return
    spec = transition_spec(request["kind"])
    batch = make_batch(spec, request["batch"], request["sender"])
    priorities = np.random.default_rng(request["sender"]).uniform(0.1, 2.0, request["batch"])
    deadline = time.monotonic() + request["max_seconds"]
    context = _context(request)
    try:
        if request["mode"] == "apex":
            shards = [ShardEndpoints(insert, requests) for insert, requests in request["shards"]]
            client = InsertClient(
                context,
                shards,
                request["sender"],
                spec,
                timeout_s=0.5,
                hwm=16,
                start_timeout_s=30.0,
                batch_hint=request["batch"],
                **({} if request.get("credit", True) else {"credit": None}),
            )
            # Paced to ``rate`` transitions/s when given (an actor fleet of a stated size),
            # else as fast as the shard takes them.
            interval_s = request["batch"] / request["rate"] if request.get("rate") else 0.0
            next_send = time.monotonic()
            while not stop["flag"] and time.monotonic() < deadline:
                if interval_s:
                    next_send += interval_s
                    delay = next_send - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                # Short waits, so that SIGTERM is seen while the shard pushes back.
                with contextlib.suppress(ReplayTimeout):
                    client.insert(batch, priorities, policy_version=0)
            client.close(linger_s=0)
        else:
            arrays = (*batch.values(), priorities)
            frames = encode(
                Message(Kind.INSERT, request["sender"], 0, 0, request["batch"], 0.0, arrays),
                pack=request.get("pack", True),
            )
            socket = context.socket(zmq.PUSH)
            socket.setsockopt(zmq.SNDHWM, 16)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect(request["shards"][0][0])
            while not stop["flag"] and time.monotonic() < deadline:
                if socket.poll(100, zmq.POLLOUT):
                    socket.send_multipart(frames, copy=False)
            socket.close(linger=0)
    finally:
        context.destroy(linger=0)


class FrameSource:
    """What a Pong actor sends a frame shard: each env's new frames (real Pong frames,
    recorded once) and the n-step records that now have their next frame."""

    def __init__(self, batch: int, compress: bool, seed: int) -> None:
        from apex.acting.frame_writer import FrameWriter
        from bench.parts.frames_suite import pong_frames

        self.frames = pong_frames(512, seed=seed)
        self.writer = FrameWriter(
            FRAME_ENVS,
            4,
            FRAME_N,
            history=batch + 8,
            compress=compress,
            rng=np.random.default_rng(seed),
        )
        self.per_env = max(1, batch // FRAME_ENVS)
        self.step = 0
        self.envs = np.arange(FRAME_ENVS)
        self.writer.observe(self.envs, self.frames[self.envs], episode_start=True)

    def next_records(self) -> tuple[np.ndarray, dict, np.ndarray]:
        parts = []
        for _ in range(self.per_env):
            self.step += 1
            frames = self.frames[(self.step + 97 * self.envs) % len(self.frames)]
            numbers = self.writer.observe(self.envs, frames, episode_start=False)
            ready = numbers >= FRAME_N
            parts.append(np.stack([self.envs[ready], numbers[ready] - FRAME_N, numbers[ready]], 1))
        refs = np.concatenate(parts).astype(np.int64)
        count = len(refs)
        scalars = {
            "action": np.zeros(count, np.int64),
            "reward": np.zeros(count, np.float32),
            "discount": np.full(count, 0.97, np.float32),
        }
        return refs, scalars, np.ones(count)

    def next_builder(self) -> Callable[[int], FrameInsert]:
        """The next message, as ``InsertClient.insert_frames`` wants it: made per shard."""
        refs, scalars, priorities = self.next_records()
        return lambda shard: self.writer.build(shard, refs, scalars, priorities)


def _always(insert: FrameInsert) -> Callable[[int], FrameInsert]:
    return lambda _shard: insert


class RecordedFrames:
    """A Pong pusher's messages to one shard, made once by a real frame writer and then
    replayed with their frame numbers moved on by a cycle's worth each lap.

    The shard sees what a live writer sends (new LZ4 frames, records, one stream per env,
    numbers running on), while the pusher's cost per message is encoding and sending, as
    for the whole-transition pushers, which resend one prebuilt batch: the ingest figure is
    the shard's, not the pusher's Python (measured apart: ``FrameSource``).
    """

    def __init__(self, batch: int, compress: bool, seed: int, cycle: int = 64) -> None:
        source = FrameSource(batch, compress, seed)
        self._inserts = []
        for _ in range(cycle + 1):  # the first message also carries each stream's first frame
            refs, scalars, priorities = source.next_records()
            insert = source.writer.build(0, refs, scalars, priorities)
            source.writer.sent_to(0, insert)
            self._inserts.append(insert)
        self._cycle = cycle
        self._shift = source.per_env * cycle
        self._sent = 0

    def next_insert(self):
        lap, index = divmod(self._sent - 1, self._cycle) if self._sent else (0, -1)
        self._sent += 1
        insert = self._inserts[index + 1]
        if lap == 0:
            return insert
        shift = lap * self._shift
        records = dict(insert.records)
        for name in ("obs_frame", "next_obs_frame"):
            records[name] = records[name] + shift
        return dataclasses.replace(insert, numbers=insert.numbers + shift, records=records)


def _context(request: dict) -> zmq.Context:
    """The pusher's context: with ``keys`` in the request, CURVE to keyed shards."""
    return make_context(SecurityConfig(request.get("keys")), need_server_secret=False)


def push_frames(request: dict, stop: dict) -> None:
    """Frames and records into frame shards through the insert client, as fast as they
    take them."""
    context = _context(request)
    try:
        shards = [ShardEndpoints(insert, requests) for insert, requests in request["shards"]]
        client = InsertClient(
            context,
            shards,
            request["sender"],
            transition_spec("atari"),
            timeout_s=0.5,
            hwm=16,
            start_timeout_s=30.0,
            batch_hint=request["batch"],
            **({} if request.get("credit", True) else {"credit": None}),
        )
        compress = client.frame_layout["compressed"]
        recorded = None
        if len(shards) == 1:
            recorded = RecordedFrames(request["batch"], compress, request["sender"])
        else:
            source = FrameSource(request["batch"], compress, request["sender"])
        deadline = time.monotonic() + request["max_seconds"]
        interval_s = request["batch"] / request["rate"] if request.get("rate") else 0.0
        next_send = time.monotonic()
        while not stop["flag"] and time.monotonic() < deadline:
            if interval_s:  # paced to ``rate`` transitions/s, as in push()
                next_send += interval_s
                delay = next_send - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            build = _always(recorded.next_insert()) if recorded else source.next_builder()
            while not stop["flag"]:
                try:
                    shard, insert = client.insert_frames(build, policy_version=0)
                except ReplayTimeout:
                    continue
                if recorded is None:
                    source.writer.sent_to(shard, insert)
                break
        client.close(linger_s=0)
    finally:
        context.destroy(linger=0)


def pull(request: dict) -> None:
    context = zmq.Context()
    socket = context.socket(zmq.PULL)
    socket.setsockopt(zmq.RCVHWM, 64)
    socket.setsockopt(zmq.LINGER, 0)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    print(json.dumps({"ready": f"tcp://127.0.0.1:{port}"}), flush=True)
    rates = []
    try:
        if not socket.poll(int(request["start_timeout_s"] * 1000)):
            raise TimeoutError("no pusher connected in time")
        warmup_end = time.monotonic() + request["warmup_s"]
        while time.monotonic() < warmup_end:
            socket.recv_multipart(copy=False)
        for _ in range(request["repeats"]):
            received = 0
            started = time.monotonic()
            window_end = started + request["seconds_per_repeat"]
            while time.monotonic() < window_end:
                if socket.poll(100):
                    socket.recv_multipart(copy=False)
                    received += 1
            rates.append(received / (time.monotonic() - started))
    finally:
        socket.close(linger=0)
        context.term()
    print(json.dumps({"rates": rates}), flush=True)


def main() -> None:
    request = json.loads(sys.argv[1])
    {"push": push, "pull": pull}[request["role"]](request)


if __name__ == "__main__":
    main()
