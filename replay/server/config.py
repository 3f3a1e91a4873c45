"""The settings of one replay shard, and the rules that keep them from deadlocking."""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.frames.spec import FrameStackSpec
from replay.server.rate_limiter import RateLimiter
from replay.store.field_checks import alpha_problems, checked
from replay.store.spec import TransitionSpec
from replay.wire.security import SecurityConfig

# Transitions a shard keeps unless told otherwise (``apex replay --capacity``), and a run's
# replay in all (``launch.config.ReplayConfig.capacity``).
DEFAULT_CAPACITY = 1_000_000


@dataclass(frozen=True)
class ShardConfig:
    """Settings of one shard; validated by :meth:`validate`.

    Attributes:
        spec: the transition fields this shard stores.
        capacity: transitions kept (FIFO eviction beyond it).
        alpha: priority exponent.
        min_size: SAMPLE requests wait until this many transitions are stored.
        samples_per_insert: if set, the replay ratio the shard holds (sampled transitions per
            inserted transition): inserts wait when sampling lags, samples when inserting
            lags (see ``replay.server.rate_limiter``).
        error_buffer: allowed deviation from ``samples_per_insert``, in transitions.
        host: address to bind; 127.0.0.1 by default (use 0.0.0.0 for other hosts).
        insert_port: PULL port, 0 for a free one.
        request_port: ROUTER port, 0 for a free one.
        shard_index: this shard's index (logged, and in INFO).
        seed: seed of the sampling generator.
        max_inserts_per_round: inserts handled per loop round at most.
        max_requests_per_round: requests handled per loop round at most.
        max_waiting_samples: SAMPLE requests kept while the store is too small or the rate
            limiter holds sampling; past it the oldest is dropped (0: none waits, each is
            answered with an ERROR).
        socket_hwm: high-water mark (messages) on both sockets.
        max_sample_batch: the largest SAMPLE a shard answers (a u32 count from a peer
            would otherwise make it allocate up to 4 billion rows, and die).
        max_message_bytes: the largest message frame a peer may send (ZeroMQ drops the
            connection of one that sends more, before buffering it).
        insert_batch_hint: transitions per insert message, usually; sizes the insert
            socket's kernel buffers (see replay.wire.transport.insert_buffer_bytes).
        poll_timeout_s: longest wait before the loop looks at the stop flag again.
        stop_quiet_s: told to stop, a shard that keeps snapshots serves on (its rate
            limiter lifted) until no insert came for this long, so senders stopping with
            it flush their last batches into its final snapshot
            (``ShardServer._serve_stop_grace``); one without snapshots stops at once.
        stop_grace_s: the longest it serves on after a stop, whatever still arrives.
        frames: store frame-stacked transitions with each frame once
            (``replay.frames.storage``): ``spec`` must then be ``frames.transition_spec``,
            and writers send INSERT_FRAMES. None: whole transitions (INSERT).
        compress_frames: keep those frames LZ4-compressed.
        gather_threads: threads that put a sampled batch's stacks together (frames kept
            whole); None: the cores this process may use, at most 4 (``replay.store.parts``).
        snapshot_dir: where this shard's snapshots go (``replay.server.snapshots``); None:
            no snapshots.
        snapshot_interval_s: seconds between background snapshots (None: only on
            request and when stopping).
        restore: start from the newest usable snapshot in ``snapshot_dir``.
        queue: queue mode (IMPALA's unrolls, ``replay.store.queue``): each item handed
            out once, oldest first; inserts wait while fewer than ``insert_batch_hint``
            items fit. Priorities, ``alpha`` and ``samples_per_insert`` do not apply.
        replay_share: in queue mode, the share of each batch replayed from items handed
            out before (IMPALA's experience replay), in [0, 1); 0: none.
        security: CURVE keys (``replay.wire.security``); without keys only loopback binds.
    """

    spec: TransitionSpec
    capacity: int
    alpha: float = 0.6
    min_size: int = 1
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
    max_sample_batch: int = 65_536
    max_message_bytes: int = 1 << 28
    insert_batch_hint: int = 50
    poll_timeout_s: float = 0.05
    stop_quiet_s: float = 0.5
    stop_grace_s: float = 10.0
    frames: FrameStackSpec | None = None
    compress_frames: bool = True
    gather_threads: int | None = None
    snapshot_dir: str | None = None
    snapshot_interval_s: float | None = None
    restore: bool = False
    queue: bool = False
    replay_share: float = 0.0
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def planned_nbytes(self) -> int:
        """The bytes this shard's store and priorities allocate at start (its memory but
        for the sockets' buffers and a batch in flight)."""
        from replay.frames.sizing import planned_nbytes  # numba's, on first use only
        from replay.store.storage import RingStorage
        from replay.store.sum_tree import SumTree

        if self.frames is not None:
            store = planned_nbytes(self.frames, self.capacity, self.compress_frames)
        else:
            store = RingStorage.planned_nbytes(self.spec, self.capacity)
        return store + (0 if self.queue else SumTree.planned_nbytes(self.capacity))

    def problems(self) -> list[str]:
        """Every problem with these settings (empty if none), with the values involved."""
        return checked(self, "", self._range_problems)

    def _range_problems(self) -> list[str]:
        problems = alpha_problems(self.alpha)
        if self.capacity <= 0:
            problems.append(f"capacity must be > 0, got {self.capacity}")
        problems += RateLimiter.problems(
            self.min_size, self.samples_per_insert, self.error_buffer, self.capacity
        )
        for name in (
            "max_inserts_per_round",
            "max_requests_per_round",
            "socket_hwm",
            "insert_batch_hint",
            "max_sample_batch",
            "max_message_bytes",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_waiting_samples < 0:
            problems.append(f"max_waiting_samples must be >= 0, got {self.max_waiting_samples}")
        for name in ("insert_port", "request_port"):
            if not 0 <= getattr(self, name) <= 65535:
                problems.append(f"{name} must be in [0, 65535], got {getattr(self, name)}")
        if self.gather_threads is not None and not 1 <= self.gather_threads <= 64:
            problems.append(f"gather_threads must be in [1, 64] or None, got {self.gather_threads}")
        if self.snapshot_interval_s is not None and not self.snapshot_interval_s > 0:
            problems.append(f"snapshot_interval_s must be > 0, got {self.snapshot_interval_s}")
        if self.restore and self.snapshot_dir is None:
            problems.append("restore needs a snapshot_dir to restore from")
        if not self.poll_timeout_s > 0:
            problems.append(f"poll_timeout_s must be > 0, got {self.poll_timeout_s}")
        for name in ("stop_quiet_s", "stop_grace_s"):
            if not 0 <= getattr(self, name) < float("inf"):
                problems.append(f"{name} must be finite and >= 0, got {getattr(self, name)}")
        if self.frames is not None and self.frames.transition_spec != self.spec:
            problems.append(
                f"spec {self.spec} is not the frame layout's {self.frames.transition_spec}"
            )
        if self.queue:
            problems += self._queue_problems()
        if not 0.0 <= self.replay_share < 1.0:
            problems.append(f"replay_share must be in [0, 1), got {self.replay_share}")
        elif self.replay_share and not self.queue:
            problems.append(
                "replay_share is for queue mode (IMPALA's unrolls); a prioritized "
                "shard replays by priority"
            )
        return problems + self.security.problems()

    def _queue_problems(self) -> list[str]:
        problems = []
        if self.frames is not None and self.frames.steps is None:
            problems.append("queue mode keeps unrolls: its frame layout must be an unroll's")
        if self.samples_per_insert is not None:
            problems.append(
                "queue mode hands each item out once: samples_per_insert does not apply"
            )
        if self.capacity < self.insert_batch_hint + self.min_size:
            problems.append(
                f"queue capacity {self.capacity} must hold insert_batch_hint "
                f"({self.insert_batch_hint}) + min_size ({self.min_size}) items, or inserts "
                "and samples could both wait"
            )
        return problems
