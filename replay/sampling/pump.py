"""The learner's view of sharded replay: the sampler's pump, which keeps batches coming.

:class:`SamplerPump` does all of the sampler's socket work, and only that: one pump round
probes shards, keeps ``prefetch`` whole batches requested or ready, takes replies, merges
finished batches and expires overdue requests. It is single-threaded; whoever owns it calls
:meth:`SamplerPump.pump`. ``replay.sampling.sampler`` has the two owners (the training
thread between steps, or a background thread) and the API the learner uses.

Where the rest lives: how a batch is split over shards and how the parts' weights merge,
``replay.sampling.batch_math``; when a shard counts as down and when it is probed,
``replay.sampling.shard_health``; what each request and reply carries, ``replay.protocol.messages``.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import zmq

from replay.errors import ProtocolError
from replay.protocol import messages
from replay.protocol.requests import RequestClient, await_spec
from replay.protocol.sample_reply import SampleReply
from replay.sampling.assembly import BatchArrays, BatchAssembly
from replay.sampling.batch_math import ReplayBatch, split_counts
from replay.sampling.shard_health import ShardHealth
from replay.store.spec import TransitionSpec
from replay.wire.layout import Kind
from replay.wire.security import SecurityConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplerConfig:
    """Settings of the learner-side sampler.

    Attributes:
        endpoints: every shard's request (ROUTER) endpoint, in shard order.
        batch_size: transitions per batch.
        beta: importance-sampling exponent (changeable later with ``set_beta``).
        prefetch: batches kept in flight or ready at once.
        sender: this learner's u32 id.
        shard_timeout_s: an unanswered request older than this marks its shard down.
        probe_interval_s: how often a down shard is asked for INFO.
        info_interval_s: how often every shard is asked for INFO (counters for metrics).
        start_timeout_s: how long the sampler's ``start`` waits for data.
        socket_hwm: high-water mark of each DEALER.
        poll_interval_s: longest one wait lasts before the stop flag is looked at.
        io_thread: True: a background thread does the replay I/O; False: the caller's
            thread does it inside ``next_batch`` (see ``replay.sampling.sampler``).
        security: keys (CURVE) of the shards' request sockets; none: plain TCP.
    """

    endpoints: tuple[str, ...]
    batch_size: int = 512
    beta: float = 0.4
    prefetch: int = 4
    sender: int = 0
    shard_timeout_s: float = 2.0
    probe_interval_s: float = 0.5
    info_interval_s: float = 1.0
    start_timeout_s: float = 30.0
    socket_hwm: int = 64
    poll_interval_s: float = 0.01
    io_thread: bool = True
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def problems(self) -> list[str]:
        """Every problem with these settings (empty if none)."""
        problems = []
        if not self.endpoints:
            problems.append("at least one shard endpoint is needed")
        if self.batch_size <= 0:
            problems.append(f"batch_size must be > 0, got {self.batch_size}")
        if not 0 <= self.beta < float("inf"):
            problems.append(f"beta must be finite and >= 0, got {self.beta}")
        if self.prefetch <= 0:
            problems.append(f"prefetch must be > 0, got {self.prefetch}")
        for name in (
            "shard_timeout_s",
            "probe_interval_s",
            "info_interval_s",
            "start_timeout_s",
            "poll_interval_s",
        ):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        return problems


@dataclass
class _Part:
    """The share of one batch asked of one shard."""

    batch: int
    shard: int
    count: int
    sent_at: float
    reply: SampleReply | None = None


@dataclass
class _PendingBatch:
    sequence: int
    rows: BatchAssembly
    # keyed by (shard, request sequence)
    parts: dict[tuple[int, int], _Part] = field(default_factory=dict)


class SamplerPump:
    """The sampler's sockets and pipeline. Make it, and call everything on it, from one
    thread (ZeroMQ sockets are not thread-safe).

    Args:
        config: endpoints and settings.
        spec: the fields the learner expects; every shard's spec is checked against it.
        context: the ZeroMQ context to make the sockets in.
        ready: where finished batches go (``stage`` applied); the pump keeps
            ``len(pending) + ready.qsize() <= prefetch``.
        stage: turns a merged batch into what the learner takes (e.g. device tensors).
        buffers: where each batch's arrays come from (``replay.sampling.assembly``);
            new numpy arrays if None.
    """

    def __init__(
        self,
        config: SamplerConfig,
        spec: TransitionSpec,
        context: zmq.Context,
        ready: queue.Queue,
        stage: Callable[[ReplayBatch], object] = lambda batch: batch,
        buffers: BatchArrays | None = None,
    ) -> None:
        self.config = config
        self.spec = spec
        self.beta = float(config.beta)
        self.ready = ready
        self.started = False
        self.batches_delivered = 0
        self.parts_redrawn = 0
        self.updates_dropped = 0
        self._context = context
        self._stage = stage
        self._buffers = buffers or BatchArrays()
        self._rng = np.random.default_rng(config.sender)
        self.health = [ShardHealth(i, e) for i, e in enumerate(config.endpoints)]
        self._clients = [
            RequestClient(context, e, config.sender, hwm=config.socket_hwm)
            for e in config.endpoints
        ]
        self.poller = zmq.Poller()
        for client in self._clients:
            self.poller.register(client.socket, zmq.POLLIN)
        self._shard_of_socket = {client.socket: i for i, client in enumerate(self._clients)}
        self._pending: dict[int, _PendingBatch] = {}
        self._parts: dict[tuple[int, int], _Part] = {}
        self._next_batch = 0
        self._unsent = 0  # numbers requests that could not be sent (negative keys)
        self.info_asked_at = -float("inf")
        self._first_probe_at: float | None = None

    def check_specs(self, stop_asked: Callable[[], bool]) -> bool:
        """Checks every shard's spec before sampling starts; False if a stop was asked
        for meanwhile.

        Raises:
            SpecMismatchError: a shard stores other fields.
            ReplayTimeout: a shard did not answer within ``start_timeout_s``.
        """
        deadline = time.monotonic() + self.config.start_timeout_s
        for endpoint in self.config.endpoints:
            answer = await_spec(
                self._context, endpoint, self.config.sender, deadline, self.spec, stop_asked
            )
            if answer is None:
                return False
        return True

    def close(self) -> None:
        for batch in self._pending.values():
            batch.rows.discard()
        self._pending.clear()
        for client in self._clients:
            client.close()
        self._clients = []

    def pump(self, poll_ms: int) -> list[zmq.Socket]:
        """One round: probes, refills the pipeline, takes replies (waiting up to
        ``poll_ms`` for the first), expires overdue requests.

        Returns:
            The sockets other than the shards' that the caller registered on
            :attr:`poller` and that are readable.
        """
        now = time.monotonic()
        self._probe(now)
        self.refill(now)
        others = []
        for socket, _ in self.poller.poll(poll_ms):
            shard = self._shard_of_socket.get(socket)
            if shard is None:
                others.append(socket)
            else:
                self._take_replies(shard)
        self._expire(time.monotonic())
        return others

    def refill(self, now: float | None = None) -> None:
        """Requests batches until ``prefetch`` are pending or ready. The first batch waits
        until every live shard's mass is known (its first INFO answered, or it is marked
        down after ``shard_timeout_s``): split over the shards that answered first, the
        first batches would all come from them."""
        now = time.monotonic() if now is None else now
        if not self.started and not self._masses_known(now):
            return
        if not self._masses().any():
            return
        self.started = True
        while len(self._pending) + self.ready.qsize() < self.config.prefetch:
            if not self._request_batch(now):
                return

    def send_updates(
        self,
        owners: np.ndarray,
        indices: np.ndarray,
        generations: np.ndarray,
        priorities: np.ndarray,
    ) -> None:
        """New priorities, each to its owning shard; dropped (and counted) where a shard's
        queue is full."""
        for shard, client in enumerate(self._clients):
            mine = owners == shard
            if mine.any():
                update = messages.PriorityUpdate(indices[mine], generations[mine], priorities[mine])
                if client.send(update) is None:
                    self.updates_dropped += 1

    def request_info(self) -> None:
        """Asks every shard for INFO now (see :meth:`infos_since`)."""
        now = time.monotonic()
        self.info_asked_at = now
        for health, client in zip(self.health, self._clients, strict=True):
            self._ask_info(health, client, now)

    def _ask_info(self, health: ShardHealth, client: RequestClient, now: float) -> None:
        sequence = client.send(Kind.INFO)
        health.asked_info(now, self.config.probe_interval_s, self.config.info_interval_s, sequence)

    def infos_since(self, asked_at: float) -> bool:
        """Whether every live shard has answered an INFO asked at ``asked_at`` or later."""
        return all(h.info_asked_at >= asked_at for h in self.health if h.alive)

    def states(self) -> list[dict[str, object]]:
        now = time.monotonic()
        return [health.state(now) for health in self.health]

    # -- the pipeline -------------------------------------------------------------------

    def _masses_known(self, now: float) -> bool:
        waiting = [h for h in self.health if h.alive and h.info is None]
        if not waiting or self._first_probe_at is None:
            return not waiting
        if now - self._first_probe_at < self.config.shard_timeout_s:
            return False
        for health in waiting:
            health.mark_down(now, "no INFO at start", self.config.probe_interval_s)
        return True

    def _probe(self, now: float) -> None:
        if self._first_probe_at is None:
            self._first_probe_at = now
        for health, client in zip(self.health, self._clients, strict=True):
            if health.wants_info(now):
                self._ask_info(health, client, now)

    def _masses(self) -> np.ndarray:
        masses = np.array([h.mass for h in self.health])
        if self.started and not masses.any():
            # Every live shard is empty (a queue the learner drained; shards restarted
            # without data): ask them evenly. Each holds the request until it has the data
            # and answers then; waiting for an INFO to show a mass cost up to a probe
            # interval a batch (a lock-step IMPALA run made 8 updates/s).
            masses = np.array([1.0 if h.alive else 0.0 for h in self.health])
        return masses

    def _request_batch(self, now: float) -> bool:
        size = self.config.batch_size
        counts = split_counts(self._masses(), size, self._rng.random(size))
        if counts is None:
            return False
        batch = _PendingBatch(self._next_batch, BatchAssembly(self.spec, size, self._buffers))
        self._next_batch += 1
        self._pending[batch.sequence] = batch
        for shard, count in enumerate(counts):
            if count:
                self._request_part(batch, shard, int(count), now)
        return True

    def _request_part(self, batch: _PendingBatch, shard: int, count: int, now: float) -> None:
        sequence = self._clients[shard].send(messages.SampleRequest(count, self.beta))
        if sequence is None:  # the shard's queue is full: treat as down, re-draw elsewhere
            self.health[shard].mark_down(now, "request queue full", self.config.probe_interval_s)
            self._unsent += 1
            key = (shard, -self._unsent)
            part = _Part(batch.sequence, shard, count, now - 2 * self.config.shard_timeout_s)
        else:
            key = (shard, sequence)
            part = _Part(batch.sequence, shard, count, now)
        batch.parts[key] = part
        self._parts[key] = part

    def _take_replies(self, shard: int) -> None:
        """Takes every reply queued from ``shard``: after a long pause of the thread that
        pumps (an evaluation, a checkpoint), replies that did arrive are taken before
        :meth:`_expire` could count them as overdue."""
        health = self.health[shard]
        for reply in self._clients[shard].drain():
            now = time.monotonic()
            health.answered(now)
            if reply.kind == Kind.INFO_REPLY:
                try:
                    health.apply_info(messages.read_info(reply), now, reply.sequence)
                except (ProtocolError, KeyError, TypeError, ValueError) as exc:
                    logger.warning("shard %d sent unreadable INFO: %s", shard, exc)
                continue
            part = self._parts.pop((shard, reply.sequence), None)
            if part is None:  # an answer to a request already re-drawn elsewhere
                continue
            batch = self._pending.get(part.batch)
            if batch is None:  # a dropped batch takes its parts out of _parts: not expected
                continue
            try:
                if reply.kind == Kind.ERROR:
                    raise ProtocolError(messages.read_error(reply))
                if len(reply.arrays) > 1 and reply.arrays[1].shape != (part.count,):
                    raise ProtocolError(f"{reply.arrays[1].shape} items for {part.count} asked")
                sample = batch.rows.add(shard, reply)
            except ProtocolError as exc:
                logger.warning("shard %d: %s; re-drawing its part", shard, exc)
                self._redraw(part, now)
                continue
            health.apply_sample(sample)
            part.reply = sample
            if all(p.reply is not None for p in batch.parts.values()):
                del self._pending[part.batch]
                minima = [h.min_positive for h in self.health if h.usable]
                merged = batch.rows.finish(minima, self.beta, batch.sequence)
                self.ready.put_nowait(self._stage(merged))
                self.batches_delivered += 1

    def _expire(self, now: float) -> None:
        limit = self.config.shard_timeout_s
        for key, part in list(self._parts.items()):
            if part.reply is not None or now - part.sent_at <= limit:
                continue
            if key not in self._parts:
                continue  # dropped with its whole batch by an earlier re-draw
            health = self.health[part.shard]
            if health.holds_for_limiter(part.sent_at):
                # Alive, and holding the request until inserts catch up: the learner
                # waits for it, as the limiter means it to (see replay.sampling.shard_health).
                part.sent_at = now
                continue
            if self._word_due(part.shard, part.sent_at, now):
                continue
            del self._parts[key]
            health.timeouts += 1
            health.mark_down(now, f"no reply within {limit} s", self.config.probe_interval_s)
            self._redraw(part, now)

    def _word_due(self, shard: int, sent_at: float, now: float) -> bool:
        """Whether an overdue SAMPLE (sent at ``sent_at``) is waited for a little longer:
        no INFO asked after it has answered yet, so nothing says whether the shard's
        limiter holds it. One is asked now if none is out; one out for half the timeout
        unanswered means the shard is not answering at all. Without this a busy machine,
        whose periodic INFO came back a moment late, had a waiting shard marked down."""
        health = self.health[shard]
        if not health.alive or health.info_asked_at >= sent_at:
            return False  # it answered since, and did not say it holds the request
        asked = health.info_unanswered_since(sent_at)
        if asked is None:
            self._ask_info(health, self._clients[shard], now)
            return health.info_unanswered_since(sent_at) is not None  # not if the queue is full
        return now - asked < self.config.shard_timeout_s / 2

    def _redraw(self, part: _Part, now: float) -> None:
        """Replaces a lost part of a pending batch with draws from the live shards."""
        batch = self._pending.get(part.batch)
        if batch is None:
            return
        batch.parts = {key: p for key, p in batch.parts.items() if p is not part}
        counts = split_counts(self._masses(), part.count, self._rng.random(part.count))
        if counts is None:  # no live shard with data: drop the batch, it is re-requested
            for key in batch.parts:
                self._parts.pop(key, None)
            del self._pending[part.batch]
            batch.rows.discard()
            return
        self.parts_redrawn += 1
        for shard, count in enumerate(counts):
            if count:
                self._request_part(batch, shard, int(count), now)
