"""One replay shard: a prioritized store served over ZeroMQ by a single-threaded loop.

Sockets (both bound by the shard, one context per process):

* PULL  ``insert_endpoint``: INSERT messages from actors (PUSH).
* ROUTER ``request_endpoint``: SAMPLE, UPDATE, INFO, SPEC, CREDIT, SNAPSHOT and STOP
  from the learner and clients (DEALER). SAMPLE, INFO and SPEC are answered; STOP (the
  run has ended) is answered with INFO and stops the shard as SIGTERM does; UPDATE is
  fire-and-forget (its
  outcome shows in INFO's counters), so the learner never waits on a round trip to send
  priorities. CREDIT is held until the asker's insert messages taken reach the number
  it asked for (or its wait runs out): the credit that keeps an actor from running far
  ahead of what the shard has taken (see ``replay.inserts.lane.ShardCredit``).

What each message carries is defined in ``replay.protocol.messages``.

The loop polls both sockets with a timeout (so it sees the stop flag), then does bounded
work per round: at most ``max_inserts_per_round`` inserts and ``max_requests_per_round``
requests. A backlog of inserts therefore never starves the learner, and a busy learner
never stops ingestion. Nothing is queued in Python beyond a bounded list of SAMPLE requests
waiting for the store to reach ``min_size`` and one of held CREDIT requests;
everything else waits in ZeroMQ's own queues, which high-water marks bound, so a fast actor
is slowed rather than buffered.

Malformed input of any kind is rejected, counted per sender and reason, logged once per
sender and reason, and never stops the loop or changes the store. The server owns a
:class:`PrioritizedReplay`; it is not one.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path

import zmq

from replay.errors import ConfigError, ProtocolError, ReplayError, SnapshotError
from replay.protocol import messages
from replay.server.config import ShardConfig
from replay.server.credit_desk import CreditDesk
from replay.server.ingest import Ingest
from replay.server.insert_desk import InsertDesk
from replay.server.rate_limiter import QueueLimiter, RateLimiter
from replay.server.sample_desk import SampleDesk
from replay.server.senders import (
    REJECT_PROTOCOL,
    REJECT_REQUEST,
    REJECT_UNEXPECTED_KIND,
    REJECT_UPDATE,
    UNKNOWN_SENDER,
    SenderBook,
    claimed_sender,
)
from replay.server.snapshots import ShardSnapshots, replay_state, restore_newest, restore_replay
from replay.store.snapshot import Snapshot
from replay.store.state import meta_counts
from replay.wire.layout import Kind, Message, decode, encode
from replay.wire.security import make_context, peer_id
from replay.wire.transport import (
    bind,
    insert_buffer_bytes,
    make_socket,
    send_frames,
)

logger = logging.getLogger(__name__)


class ShardServer:
    """Serves one :class:`PrioritizedReplay` over a PULL and a ROUTER socket.

    Construct it in the process that will run it (the ZeroMQ context is created here),
    read the bound endpoints, then call :meth:`serve` until :meth:`stop` is called.

    Args:
        config: the shard's settings.

    Raises:
        ConfigError: listing every problem with ``config``.
        zmq.ZMQError: a port cannot be bound.
    """

    def __init__(self, config: ShardConfig) -> None:
        problems = config.problems()
        if problems:
            raise ConfigError(problems, "shard config")
        self.config = config
        self._ingest = Ingest(config)
        self.replay = self._ingest.replay
        self.limiter: QueueLimiter | RateLimiter
        if config.queue:
            # Asked of self.replay each time: a restore replaces the store.
            self.limiter = QueueLimiter(
                lambda: self.replay.room,
                config.insert_batch_hint,
                config.min_size,
                self._fresh_needed,
            )
        else:
            self.limiter = RateLimiter(
                config.min_size, config.samples_per_insert, config.error_buffer
            )
        self._index = config.shard_index
        self._senders = SenderBook(config.shard_index)
        self._samples = SampleDesk(
            config, self.limiter, lambda: self._ingest, self._send, self._refuse
        )
        self.updates_applied = 0
        self._snapshots = None
        if config.snapshot_dir is not None:
            root = Path(config.snapshot_dir)
            if config.restore:
                self._restore_newest(root)
            self._snapshots = ShardSnapshots(
                root, config.snapshot_interval_s, self.state, config.shard_index
            )
        self._stop = threading.Event()
        self._context = make_context(config.security)
        self._pull = make_socket(
            self._context,
            zmq.PULL,
            config.socket_hwm,
            kernel_buffer_bytes=insert_buffer_bytes(
                config.insert_batch_hint * config.spec.item_nbytes
            ),
        )
        self._router = make_socket(self._context, zmq.ROUTER, config.socket_hwm)
        for socket in (self._pull, self._router):
            socket.setsockopt(zmq.MAXMSGSIZE, config.max_message_bytes)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 0)  # replies to vanished peers drop
        try:
            self.insert_endpoint = bind(self._pull, config.host, config.insert_port)
            self.request_endpoint = bind(self._router, config.host, config.request_port)
        except (ConfigError, zmq.ZMQError):
            self.close()
            raise
        self._poller = zmq.Poller()
        self._poller.register(self._pull, zmq.POLLIN)
        self._poller.register(self._router, zmq.POLLIN)
        self._replies_dropped = 0
        self._credit = CreditDesk(
            self._senders,
            self._send,
            config.shard_index,
            widen=not config.queue,
            limiter_holds=lambda: not self.may_insert(),
        )
        self._inserts = InsertDesk(
            self._pull,
            config.max_inserts_per_round,
            self._senders,
            self._credit,
            self.limiter,
            self.may_insert,
            lambda: self._ingest,
        )
        self._stopping = False
        self._started = self._inserted_at = time.monotonic()

    def _fresh_needed(self, batch_size: int) -> int:
        return self.replay.fresh_needed(batch_size)

    def stop(self) -> None:
        """Asks :meth:`serve` to stop taking requests' time and return once its senders'
        last batches are in (see :meth:`_serve_stop_grace`); safe from any thread or a
        signal handler."""
        self._stop.set()

    def may_insert(self, pending: int = 0) -> bool:
        """Whether the shard takes another insert message now, ``pending`` transitions
        taken this round: its limiter's word, lifted (``can_insert_unpaced``) while it
        stops or a stopping sender flushes to it (a ``final`` CREDIT question), since
        nothing may sample again and what it refuses then is lost."""
        if self.limiter.can_insert(pending):
            return True
        lifted = self._stopping or self._credit.final_held()
        return lifted and self.limiter.can_insert_unpaced(pending)

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
                self._serve_round(poll_ms)
                if self._snapshots is not None:
                    self._snapshots.tick()
            # The grace exists for the final snapshot: without one, what the senders
            # flush after the stop would be dropped at exit all the same.
            if self._snapshots is not None:
                self._serve_stop_grace()
        finally:
            if self._snapshots is not None:
                self._snapshots.final()
            self.close()
            logger.info("shard %d stopped: %s", self.config.shard_index, self.counters())

    def _serve_round(self, poll_ms: int) -> None:
        # While inserts must wait, the PULL socket is not polled: its queue fills to the
        # high-water mark and the actors feel the back-pressure.
        self._poller.modify(self._pull, zmq.POLLIN if self.may_insert() else 0)
        ready = dict(self._poller.poll(poll_ms))
        if self._pull in ready and self._inserts.drain():
            self._inserted_at = time.monotonic()
        if self._router in ready:
            self._drain_requests()
        self._samples.answer_waiting()
        if self._credit:
            self._credit.expire()

    def _serve_stop_grace(self) -> None:
        """Serves on, the limiter lifted, until no insert came for ``stop_quiet_s`` (at
        most ``stop_grace_s``), so the final snapshot holds what the senders flush.

        Under Slurm every step of a job is signalled at once (a requeue, a time limit):
        actors still flush while their shards stop, and a shard that left at once lost
        their last batches and everything its limiter held queued. A shard idle for
        ``stop_quiet_s`` before the stop leaves after one round; one whose limiter held
        inserts gives its blocked senders ``stop_quiet_s`` to send."""
        self._stopping = True
        started = time.monotonic()
        held = not self.limiter.can_insert()
        quiet_since = started if held else self._inserted_at
        poll_ms = max(1, int(min(self.config.poll_timeout_s, self.config.stop_quiet_s) * 1000))
        while True:
            self._serve_round(poll_ms)
            now = time.monotonic()
            quiet_since = max(quiet_since, self._inserted_at)
            if now - quiet_since >= self.config.stop_quiet_s:
                break
            if now - started >= self.config.stop_grace_s:
                logger.warning(
                    "shard %d: senders still sending after a stop grace of %.1f s; stopping",
                    self._index,
                    self.config.stop_grace_s,
                )
                break

    def close(self) -> None:
        self._pull.close(linger=0)
        self._router.close(linger=0)
        self._context.term()

    def _drain_requests(self) -> None:
        for _ in range(self.config.max_requests_per_round):
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._on_request(frames)

    # -- requests -----------------------------------------------------------------------

    def _on_request(self, frames: list) -> None:
        identity = frames[0].bytes
        try:
            message = decode(frames[1:])
        except ProtocolError as exc:
            sender = claimed_sender(frames[1]) if len(frames) > 1 else UNKNOWN_SENDER
            self._senders.reject(self._senders.known(sender), REJECT_PROTOCOL, exc)
            self._reply_error(identity, 0, f"rejected: {exc}")
            return
        sender = self._senders.account(message.sender, lambda: peer_id(frames[0]))
        if sender != message.sender:  # counted (and refused, updated) as the pool
            message = dataclasses.replace(message, sender=sender)
        self._senders.get(sender).requests += 1
        self._samples.heard(identity, sender)
        if message.kind == Kind.SAMPLE:
            self._samples.ask(identity, message)
        elif message.kind == Kind.UPDATE:
            self._apply_update(message)
        elif message.kind == Kind.INFO:
            self._send(
                identity, messages.info_reply(self.counters(), self._index, message.sequence)
            )
        elif message.kind == Kind.CREDIT:
            try:
                self._credit.ask(identity, message)
            except ProtocolError as exc:
                self._refuse(identity, message, REJECT_REQUEST, str(exc))
        elif message.kind == Kind.SNAPSHOT:
            if self._snapshots is None:
                self._refuse(identity, message, REJECT_REQUEST, "this shard keeps no snapshots")
                return
            self._snapshots.request()
            self._send(
                identity, messages.info_reply(self.counters(), self._index, message.sequence)
            )
        elif message.kind == Kind.STOP:  # the run has ended: as a SIGTERM
            logger.info("shard %d: sender %d ended the run; stopping", self._index, sender)
            self._send(
                identity, messages.info_reply(self.counters(), self._index, message.sequence)
            )
            self.stop()
        elif message.kind == Kind.SPEC:
            layout = self._ingest.frame_layout
            reply = messages.spec_reply(self.config.spec, self._index, message.sequence, layout)
            self._send(identity, reply)
        else:
            self._refuse(
                identity, message, REJECT_UNEXPECTED_KIND, f"unexpected kind {message.kind.name}"
            )

    def _apply_update(self, message: Message) -> None:
        try:
            update = messages.PriorityUpdate.from_message(message)
            self.replay.update_priorities(update.indices, update.generations, update.priorities)
        except ReplayError as exc:  # ProtocolError included
            self._senders.reject(message.sender, REJECT_UPDATE, exc)
            return
        self.updates_applied += 1

    def _send(self, identity: bytes, message: Message) -> None:
        # Sampled arrays are fresh per request, so sending them without a copy is safe:
        # nothing writes to them after this call.
        try:
            send_frames(self._router, [identity, *encode(message)], zmq.NOBLOCK)
        except zmq.Again:  # a peer that does not read its replies: counted, logged once
            self._replies_dropped += 1
            if self._replies_dropped == 1:
                logger.warning(
                    "shard %d: a reply to a full peer queue dropped (further ones "
                    "are counted in replies_dropped)",
                    self._index,
                )

    def _reply_error(self, identity: bytes, sequence: int, text: str) -> None:
        self._send(identity, messages.error(text, self._index, sequence))

    def _refuse(self, identity: bytes, message: Message, reason: str, text: str) -> None:
        """Counts a rejected request and answers it with an ERROR saying why."""
        self._senders.reject(message.sender, reason, text)
        self._reply_error(identity, message.sequence, text)

    def counters(self) -> dict[str, object]:
        """Everything INFO reports; plain JSON types only."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rejected = self._senders.rejected()
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
            "samples_served": self._samples.served,
            "transitions_sampled": self._samples.transitions,
            "updates_applied": self.updates_applied,
            "dropped_stale_updates": self.replay.update_drops.get("stale", 0),
            "updates_dropped": self.replay.update_drops,
            "inserts_per_s": self.replay.items_added / elapsed,
            "samples_per_s": self._samples.served / elapsed,
            "rejected": rejected,
            "rejected_total": sum(rejected.values()),
            "refused": self._context.refusals(),
            "samples_per_insert": self.config.samples_per_insert,
            "rate_limiter_diff": self.limiter.diff,
            "inserts_waiting": not self.may_insert(),
            "stopping": self._stopping,
            "samples_waiting": self._samples.waiting,
            "waiting_samples_dropped": self._samples.dropped,
            "replies_dropped": self._replies_dropped,
            "senders": self._senders.counters(),
            **self._senders.delivery(),
            "uptime_s": elapsed,
            "cpu_s": time.process_time(),  # this process, every thread: for apex top
            **self._ingest.counters(),
            **(self._snapshots.counters() if self._snapshots is not None else {}),
        }

    # -- snapshots (see replay.server.snapshots) ------------------------------------------

    def state(self) -> tuple[dict, dict]:
        """Everything a snapshot keeps: the store, and the counts that make totals."""
        arrays, meta = replay_state(self.replay)
        meta["shard"] = {
            "index": self._index,
            "written_unix": time.time(),
            "size": self.replay.size,
            "limiter": [self.limiter.inserted, self.limiter.sampled],
            "served": [self._samples.served, self._samples.transitions, self.updates_applied],
            "frames_received": self._ingest.frames_received,
            "senders": self._senders.state(),
        }
        return arrays, meta

    def restore(self, snapshot: Snapshot) -> None:
        """Takes back :meth:`state` from ``snapshot``.

        Raises:
            SnapshotError: a snapshot of another store or settings, or unusable.
        """
        restore_replay(self.replay, snapshot.read, snapshot.meta)
        shard = snapshot.meta.get("shard")
        if not isinstance(shard, dict):
            raise SnapshotError(f"{snapshot.path}: no shard counters")
        counts = [*meta_counts(shard.get("limiter"), 2), *meta_counts(shard.get("served"), 3)]
        self._senders.restore(shard.get("senders"))
        self.limiter.inserted, self.limiter.sampled = counts[:2]
        self._samples.served, self._samples.transitions, self.updates_applied = counts[2:]
        self._ingest.frames_received = meta_counts([shard.get("frames_received")], 1)[0]

    def _restore_newest(self, root: Path) -> None:
        """``replay.server.snapshots.restore_newest`` into this shard."""
        attempts = []

        def load(snapshot: Snapshot) -> None:
            if attempts:  # a refused snapshot may have been half read: start clean
                self._ingest = Ingest(self.config)
                self.replay = self._ingest.replay
            attempts.append(snapshot.path)
            self.restore(snapshot)

        restore_newest(root, load, self._index, lambda: self.replay.size)
