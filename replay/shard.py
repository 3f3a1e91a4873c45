"""One replay shard: a prioritized store served over ZeroMQ by a single-threaded loop.

Sockets (both bound by the shard, one context per process):

* PULL  ``insert_endpoint``: INSERT messages from actors (PUSH).
* ROUTER ``request_endpoint``: SAMPLE, UPDATE, INFO, SPEC and RECEIVED from the learner
  and clients (DEALER). SAMPLE, INFO and SPEC are answered; UPDATE is fire-and-forget (its
  outcome shows in INFO's counters), so the learner never waits on a round trip to send
  priorities. RECEIVED is held until the asker's insert messages taken reach the number
  it asked for (or its wait runs out): the credit that keeps an actor from running far
  ahead of what the shard has taken (see ``replay.client.InsertClient``).

The loop polls both sockets with a timeout (so it sees the stop flag), then does bounded
work per round: at most ``max_inserts_per_round`` inserts and ``max_requests_per_round``
requests. A backlog of inserts therefore never starves the learner, and a busy learner
never stops ingestion. Nothing is queued in Python beyond a bounded list of SAMPLE requests
waiting for the store to reach ``min_size_to_sample`` and one of held RECEIVED requests;
everything else waits in ZeroMQ's own queues, which high-water marks bound, so a fast actor
is slowed rather than buffered.

Malformed input of any kind is rejected, counted per sender and reason, logged once per
sender and reason, and never stops the loop or changes the store. The server owns a
:class:`PrioritizedReplay`; it is not one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import zmq

from replay.errors import ProtocolError, ReplayError
from replay.prioritized import PrioritizedReplay
from replay.rate_limiter import RateLimiter
from replay.spec import TransitionSpec
from replay.transport import bind, insert_buffer_bytes, make_socket, send_frames
from replay.wire import Kind, Message, decode, encode, spec_to_array, text_array

logger = logging.getLogger(__name__)

# Reasons a message is rejected, the keys of the per-sender rejection counters.
REJECT_PROTOCOL = "protocol"
REJECT_INSERT = "insert"
REJECT_UPDATE = "update"
REJECT_REQUEST = "request"
REJECT_UNEXPECTED_KIND = "unexpected_kind"
# Sender ids are whatever a peer claims; keep at most this many apart, then pool the rest.
MAX_TRACKED_SENDERS = 4096
# RECEIVED requests held at once (about one per actor); more are answered at once.
MAX_WAITING_RECEIPTS = 4096
MAX_RECEIPT_WAIT_MS = 10_000
OTHER_SENDERS = -1


@dataclass(frozen=True)
class ShardConfig:
    """Settings of one shard; validated by :meth:`validate`.

    Attributes:
        spec: the transition fields this shard stores.
        capacity: transitions kept (FIFO eviction beyond it).
        alpha: priority exponent.
        min_size_to_sample: SAMPLE requests wait until this many transitions are stored.
        samples_per_insert: if set, the replay ratio the shard holds (sampled transitions per
            inserted transition): inserts wait when sampling lags, samples when inserting
            lags (see ``replay.rate_limiter``).
        error_buffer: allowed deviation from ``samples_per_insert``, in transitions.
        host: address to bind; 127.0.0.1 by default (use 0.0.0.0 for other hosts).
        insert_port: PULL port, 0 for a free one.
        request_port: ROUTER port, 0 for a free one.
        shard_index: this shard's index (logged, and in INFO).
        seed: seed of the sampling generator.
        max_inserts_per_round: inserts handled per loop round at most.
        max_requests_per_round: requests handled per loop round at most.
        max_waiting_samples: SAMPLE requests kept while the store is too small; more are
            answered with an ERROR.
        socket_hwm: high-water mark (messages) on both sockets.
        insert_batch_hint: transitions per insert message, usually; sizes the insert
            socket's kernel buffers (see replay.transport.insert_buffer_bytes).
        poll_timeout_s: longest wait before the loop looks at the stop flag again.
    """

    spec: TransitionSpec
    capacity: int
    alpha: float = 0.6
    min_size_to_sample: int = 1
    samples_per_insert: float | None = None
    error_buffer: float = 0.0
    host: str = "127.0.0.1"
    insert_port: int = 0
    request_port: int = 0
    shard_index: int = 0
    seed: int = 0
    max_inserts_per_round: int = 64
    max_requests_per_round: int = 16
    max_waiting_samples: int = 64
    socket_hwm: int = 64
    insert_batch_hint: int = 50
    poll_timeout_s: float = 0.05

    def validate(self) -> list[str]:
        """Every problem with these settings (empty if none), with the values involved."""
        problems = []
        if self.capacity <= 0:
            problems.append(f"capacity must be > 0, got {self.capacity}")
        problems += RateLimiter.problems(
            self.min_size_to_sample, self.samples_per_insert, self.error_buffer, self.capacity
        )
        for name in (
            "max_inserts_per_round",
            "max_requests_per_round",
            "socket_hwm",
            "insert_batch_hint",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_waiting_samples < 0:
            problems.append(f"max_waiting_samples must be >= 0, got {self.max_waiting_samples}")
        for name in ("insert_port", "request_port"):
            if not 0 <= getattr(self, name) <= 65535:
                problems.append(f"{name} must be in [0, 65535], got {getattr(self, name)}")
        if not self.poll_timeout_s > 0:
            problems.append(f"poll_timeout_s must be > 0, got {self.poll_timeout_s}")
        return problems


@dataclass(frozen=True)
class Receipt:
    """A RECEIVED request held until its sender's insert messages reach ``wanted``."""

    identity: bytes
    sender: int
    sequence: int
    wanted: float
    deadline: float


@dataclass
class SenderStats:
    """Counters for one sender id."""

    inserts: int = 0
    taken: int = 0
    transitions: int = 0
    requests: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    policy_version_min: int | None = None
    policy_version_max: int | None = None
    last_sequence: int | None = None


class ShardServer:
    """Serves one :class:`PrioritizedReplay` over a PULL and a ROUTER socket.

    Construct it in the process that will run it (the ZeroMQ context is created here),
    read the bound endpoints, then call :meth:`serve` until :meth:`stop` is called.

    Args:
        config: the shard's settings.

    Raises:
        ValueError: listing every problem with ``config``.
        zmq.ZMQError: a port cannot be bound.
    """

    def __init__(self, config: ShardConfig) -> None:
        problems = config.validate()
        if problems:
            raise ValueError("invalid shard config: " + "; ".join(problems))
        self.config = config
        self.replay = PrioritizedReplay(config.spec, config.capacity, config.alpha, rng=config.seed)
        self.limiter = RateLimiter(
            config.min_size_to_sample, config.samples_per_insert, config.error_buffer
        )
        self._stop = threading.Event()
        self._context = zmq.Context()
        self._pull = make_socket(
            self._context,
            zmq.PULL,
            config.socket_hwm,
            kernel_buffer_bytes=insert_buffer_bytes(
                config.insert_batch_hint * config.spec.item_nbytes
            ),
        )
        self._router = make_socket(self._context, zmq.ROUTER, config.socket_hwm)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 0)  # replies to vanished peers drop
        self.insert_endpoint = bind(self._pull, config.host, config.insert_port)
        self.request_endpoint = bind(self._router, config.host, config.request_port)
        self._poller = zmq.Poller()
        self._poller.register(self._pull, zmq.POLLIN)
        self._poller.register(self._router, zmq.POLLIN)
        self._waiting_samples: deque[tuple[bytes, Message]] = deque()
        self._waiting_receipts: list[Receipt] = []
        self._senders: dict[int, SenderStats] = {}
        self._logged: set[tuple[int, str]] = set()
        self._started = time.monotonic()
        self.samples_served = 0
        self.transitions_sampled = 0
        self.updates_applied = 0

    def stop(self) -> None:
        """Asks :meth:`serve` to return after its current round (safe from any thread or
        a signal handler)."""
        self._stop.set()

    def serve(self) -> None:
        """Runs the loop until :meth:`stop`; closes the sockets and context on return."""
        logger.info(
            "shard %d serving: inserts on %s, requests on %s, capacity %d",
            self.config.shard_index,
            self.insert_endpoint,
            self.request_endpoint,
            self.config.capacity,
        )
        poll_ms = int(self.config.poll_timeout_s * 1000)
        try:
            while not self._stop.is_set():
                # While inserts must wait, the PULL socket is not polled: its queue fills
                # to the high-water mark and the actors feel the back-pressure.
                self._poller.modify(self._pull, zmq.POLLIN if self.limiter.can_insert() else 0)
                ready = dict(self._poller.poll(poll_ms))
                if self._pull in ready:
                    self._drain(self._pull, self.config.max_inserts_per_round, self._on_insert)
                if self._router in ready:
                    self._drain(self._router, self.config.max_requests_per_round, self._on_request)
                while self._waiting_samples and self.limiter.can_sample(self.replay.size):
                    self._answer_sample(*self._waiting_samples.popleft())
                if self._waiting_receipts:
                    self._answer_receipts()
        finally:
            self.close()
            logger.info("shard %d stopped: %s", self.config.shard_index, self.counters())

    def close(self) -> None:
        self._pull.close(linger=0)
        self._router.close(linger=0)
        self._context.term()

    def _drain(self, socket: zmq.Socket, limit: int, handler) -> None:
        for _ in range(limit):
            if socket is self._pull and not self.limiter.can_insert():
                return
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            handler(frames)

    # -- inserts ------------------------------------------------------------------------

    def _on_insert(self, frames: list) -> None:
        try:
            message = decode(frames)
        except ProtocolError as exc:
            sender = _claimed_sender(frames[0])
            self._sender(sender).taken += 1
            self._reject(sender, REJECT_PROTOCOL, exc)
            return
        stats = self._sender(message.sender)
        stats.taken += 1
        if message.kind != Kind.INSERT:
            self._reject(message.sender, REJECT_UNEXPECTED_KIND, f"{message.kind.name} on PULL")
            return
        fields = self.config.spec
        if len(message.arrays) != len(fields) + 1:
            self._reject(
                message.sender,
                REJECT_INSERT,
                f"{len(message.arrays)} arrays, expected {len(fields)} fields + priorities",
            )
            return
        batch = dict(zip(fields, message.arrays[:-1], strict=True))
        try:
            self.replay.add(batch, message.arrays[-1])
        except ReplayError as exc:
            self._reject(message.sender, REJECT_INSERT, exc)
            return
        self.limiter.record_insert(len(message.arrays[-1]))
        stats.inserts += 1
        stats.transitions += len(message.arrays[-1])
        stats.last_sequence = message.sequence
        if message.policy_version >= 0:
            version = message.policy_version
            low, high = stats.policy_version_min, stats.policy_version_max
            stats.policy_version_min = version if low is None else min(low, version)
            stats.policy_version_max = version if high is None else max(high, version)

    # -- requests -----------------------------------------------------------------------

    def _on_request(self, frames: list) -> None:
        identity = frames[0].bytes
        try:
            message = decode(frames[1:])
        except ProtocolError as exc:
            sender = _claimed_sender(frames[1]) if len(frames) > 1 else OTHER_SENDERS
            self._reject(sender, REJECT_PROTOCOL, exc)
            self._reply_error(identity, 0, f"rejected: {exc}")
            return
        self._sender(message.sender).requests += 1
        if message.kind == Kind.SAMPLE:
            if message.count <= 0 or not 0 <= message.scalar < float("inf"):
                self._reject(
                    message.sender, REJECT_REQUEST, f"batch {message.count}, beta {message.scalar}"
                )
                self._reply_error(
                    identity, message.sequence, "SAMPLE needs count > 0 and finite beta >= 0"
                )
            elif not self._waiting_samples and self.limiter.can_sample(self.replay.size):
                self._answer_sample(identity, message)
            elif len(self._waiting_samples) < self.config.max_waiting_samples:
                self._waiting_samples.append((identity, message))
            else:
                self._reject(message.sender, REJECT_REQUEST, "too many SAMPLE requests waiting")
                self._reply_error(identity, message.sequence, "too many SAMPLE requests waiting")
        elif message.kind == Kind.UPDATE:
            self._apply_update(message)
        elif message.kind == Kind.INFO:
            info = json.dumps(self.counters())
            self._send(
                identity,
                Message(
                    Kind.INFO_REPLY,
                    self.config.shard_index,
                    message.sequence,
                    arrays=(text_array(info),),
                ),
            )
        elif message.kind == Kind.RECEIVED:
            self._on_receipt_request(identity, message)
        elif message.kind == Kind.SPEC:
            self._send(
                identity,
                Message(
                    Kind.SPEC_REPLY,
                    self.config.shard_index,
                    message.sequence,
                    arrays=(spec_to_array(self.config.spec),),
                ),
            )
        else:
            self._reject(message.sender, REJECT_UNEXPECTED_KIND, f"{message.kind.name} on ROUTER")
            self._reply_error(identity, message.sequence, f"unexpected kind {message.kind.name}")

    # -- receipts: how far an actor may run ahead (credit-based flow control) ----------

    def _on_receipt_request(self, identity: bytes, message: Message) -> None:
        if not 0.0 <= message.scalar < 2.0**53:  # also refuses NaN
            self._reject(message.sender, REJECT_REQUEST, f"RECEIVED of {message.scalar}")
            self._reply_error(identity, message.sequence, "RECEIVED needs a count >= 0")
            return
        receipt = Receipt(
            identity,
            message.sender,
            message.sequence,
            message.scalar,
            time.monotonic() + min(message.count, MAX_RECEIPT_WAIT_MS) / 1000,
        )
        if (
            self._sender(message.sender).taken >= receipt.wanted
            or message.count == 0
            or len(self._waiting_receipts) >= MAX_WAITING_RECEIPTS
        ):
            self._send_receipt(receipt)
        else:
            self._waiting_receipts.append(receipt)

    def _answer_receipts(self) -> None:
        now = time.monotonic()
        still_waiting = []
        for receipt in self._waiting_receipts:
            if self._sender(receipt.sender).taken >= receipt.wanted or now >= receipt.deadline:
                self._send_receipt(receipt)
            else:
                still_waiting.append(receipt)
        self._waiting_receipts = still_waiting

    def _send_receipt(self, receipt: Receipt) -> None:
        taken = float(self._sender(receipt.sender).taken)
        self._send(
            receipt.identity,
            Message(Kind.RECEIVED_REPLY, self.config.shard_index, receipt.sequence, scalar=taken),
        )

    def _answer_sample(self, identity: bytes, message: Message) -> None:
        try:
            sample = self.replay.sample(message.count, message.scalar)
        except ReplayError as exc:  # e.g. every stored priority is zero
            self._reply_error(identity, message.sequence, f"cannot sample: {exc}")
            return
        stats = np.array(
            [
                self.replay.total_priority,
                self.replay.min_priority,
                self.replay.size,
                self.replay.capacity,
            ],
            dtype=np.float64,
        )
        arrays = (
            stats,
            sample.indices,
            sample.generations,
            sample.priorities,
            sample.weights,
            *sample.transitions.values(),
        )
        self._send(
            identity,
            Message(
                Kind.SAMPLE_REPLY,
                self.config.shard_index,
                message.sequence,
                count=message.count,
                arrays=arrays,
            ),
        )
        self.limiter.record_sample(message.count)
        self.samples_served += 1
        self.transitions_sampled += message.count

    def _apply_update(self, message: Message) -> None:
        arrays = message.arrays
        if len(arrays) != 3 or arrays[0].dtype != np.int64 or arrays[1].dtype != np.int64:
            self._reject(
                message.sender,
                REJECT_UPDATE,
                "UPDATE needs int64 indices, int64 generations, priorities",
            )
            return
        try:
            self.replay.update_priorities(arrays[0], arrays[1], arrays[2])
        except ReplayError as exc:
            self._reject(message.sender, REJECT_UPDATE, exc)
            return
        self.updates_applied += 1

    def _send(self, identity: bytes, message: Message) -> None:
        # Sampled arrays are fresh per request, so sending them without a copy is safe:
        # nothing writes to them after this call.
        try:
            send_frames(self._router, [identity, *encode(message)], zmq.NOBLOCK)
        except zmq.Again:
            logger.warning("shard %d: reply to a full peer queue dropped", self.config.shard_index)

    def _reply_error(self, identity: bytes, sequence: int, text: str) -> None:
        self._send(
            identity,
            Message(Kind.ERROR, self.config.shard_index, sequence, arrays=(text_array(text),)),
        )

    # -- accounting ---------------------------------------------------------------------

    def _sender(self, sender: int) -> SenderStats:
        stats = self._senders.get(sender)
        if stats is None:
            if len(self._senders) >= MAX_TRACKED_SENDERS:
                sender = OTHER_SENDERS
            stats = self._senders.setdefault(sender, SenderStats())
        return stats

    def _reject(self, sender: int, reason: str, detail: object) -> None:
        stats = self._sender(sender)
        stats.rejected[reason] = stats.rejected.get(reason, 0) + 1
        key = (sender, reason)
        if key not in self._logged and len(self._logged) < MAX_TRACKED_SENDERS:
            self._logged.add(key)
            logger.warning(
                "shard %d rejected a message from sender %d (%s): %s "
                "(further %s rejections from this sender are counted, not logged)",
                self.config.shard_index, sender, reason, detail, reason,
            )  # fmt: skip

    def counters(self) -> dict[str, object]:
        """Everything INFO reports; plain JSON types only."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rejected: dict[str, int] = {}
        for stats in self._senders.values():
            for reason, count in stats.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + count
        return {
            "shard_index": self.config.shard_index,
            "size": self.replay.size,
            "capacity": self.replay.capacity,
            "total_priority": self.replay.total_priority,
            # JSON has no infinity: None means no positive priority is stored.
            "min_priority": smallest
            if (smallest := self.replay.min_priority) < float("inf")
            else None,
            "transitions_added": self.replay.items_added,
            "samples_served": self.samples_served,
            "transitions_sampled": self.transitions_sampled,
            "updates_applied": self.updates_applied,
            "dropped_stale_updates": self.replay.dropped_updates,
            "inserts_per_s": self.replay.items_added / elapsed,
            "samples_per_s": self.samples_served / elapsed,
            "rejected": rejected,
            "rejected_total": sum(rejected.values()),
            "samples_per_insert": self.config.samples_per_insert,
            "rate_limiter_diff": self.limiter.diff,
            "inserts_waiting": not self.limiter.can_insert(),
            "samples_waiting": len(self._waiting_samples),
            "senders": {
                str(sender): {
                    "inserts": s.inserts,
                    "insert_messages_taken": s.taken,
                    "transitions": s.transitions,
                    "requests": s.requests,
                    "rejected": dict(s.rejected),
                    "policy_version_min": s.policy_version_min,
                    "policy_version_max": s.policy_version_max,
                    "last_sequence": s.last_sequence,
                }
                for sender, s in self._senders.items()
            },
            "uptime_s": elapsed,
        }


def _claimed_sender(header_frame: object) -> int:
    """The sender id a malformed message claims, if its header gets that far; else -1."""
    header = memoryview(getattr(header_frame, "buffer", header_frame)).cast("B")
    if len(header) >= 8:
        return int.from_bytes(header[4:8], "little")
    return OTHER_SENDERS
