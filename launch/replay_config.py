"""The run config's ``[replay]`` section: the whole replay of a run, which its shards
share."""

from __future__ import annotations

from dataclasses import dataclass, replace

from launch.supervision.restarts import SHARD_RESTART_BUDGET
from replay.server.config import DEFAULT_CAPACITY
from replay.server.rate_limiter import RateLimiter
from replay.store.field_checks import alpha_problems, checked, not_positive_integers


@dataclass(frozen=True)
class ReplayConfig:
    """The run's whole replay; each of the run's S shards keeps a 1/S share of it.

    Totals, not per-shard figures, so that the learning dynamics do not change with the
    shard count: with per-shard buffers, four shards let actors run four times as far
    ahead of the learner before pushing back, and the learner trains on that stale data.

    Attributes:
        capacity: transitions kept in all.
        alpha: priority exponent.
        min_size: transitions stored in all before the learner samples.
        samples_per_insert: the replay ratio every shard holds (None: no limit).
        error_buffer: allowed deviation from ``samples_per_insert`` in all, in transitions.
        frames: keep each frame of image-stack observations once (``replay.frames.storage``);
            None: yes where the env family stacks frames (the ALE pipeline's), else every
            observation whole. True for another env: its observations are proven to be
            stacks before the run starts and by each actor (``apex.acting.frame_check``).
        compress_frames: keep (and send) those frames LZ4-compressed.
        gather_threads: threads a shard puts a sampled batch's stacks together with; 0:
            the cores it may use, at most 4.
        snapshot_interval_s: seconds between a shard's background snapshots in a run
            (``RUN_DIR/replay/shard-N``; a shard also writes one when it stops, and comes
            back from the newest when the run resumes or requeues); 0: no snapshots.
        replay_share: for IMPALA's queues, the share of each batch replayed from unrolls
            handed out before (its experience-replay variant), in [0, 1); 0: none.
        restart_budget: times a dead shard is restarted (by ``apex train``'s supervisor, or
            its Slurm task's keeper). Past it the shard is given up: the run goes on with
            the others (actors send them what they kept for it after
            ``actor.reroute_after_s``), or ends when none is left.
    """

    capacity: int = DEFAULT_CAPACITY
    alpha: float = 0.6
    min_size: int = 50_000
    samples_per_insert: float | None = None
    error_buffer: float = 0.0
    frames: bool | None = None
    compress_frames: bool = True
    gather_threads: int = 0
    snapshot_interval_s: float = 300.0
    replay_share: float = 0.0
    restart_budget: int = SHARD_RESTART_BUDGET

    def shard_share(self, shards: int) -> ReplayConfig:
        """One shard's settings: totals divided over ``shards``, integers rounded up."""
        return replace(
            self,
            capacity=-(-self.capacity // shards),
            min_size=-(-self.min_size // shards),
            error_buffer=self.error_buffer / shards,
        )

    def problems(self, prefix: str = "replay.", queue: bool = False) -> list[str]:
        """Every problem with these settings (empty if none). The rate limiter's own rules
        (``RateLimiter.problems``) apply to the totals as they do to each shard, except
        for queues (``queue``), which hand each item out once and keep no ratio; each
        shard's own checks run on its share (``launch.preflight``)."""
        return checked(self, prefix, lambda: self._range_problems(prefix, queue))

    def _range_problems(self, prefix: str, queue: bool) -> list[str]:
        problems = alpha_problems(self.alpha, f"{prefix}alpha")
        problems += not_positive_integers(
            {f"{prefix}capacity": self.capacity, f"{prefix}min_size": self.min_size}
        )
        interval = self.snapshot_interval_s
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval < 0:
            problems.append(f"{prefix}snapshot_interval_s must be >= 0 (0: none), got {interval!r}")
        budget = self.restart_budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            problems.append(f"{prefix}restart_budget must be an integer >= 0, got {budget!r}")
        if not isinstance(self.replay_share, (int, float)) or not 0 <= self.replay_share < 1:
            problems.append(f"{prefix}replay_share must be in [0, 1), got {self.replay_share!r}")
        threads = self.gather_threads
        if not isinstance(threads, int) or isinstance(threads, bool) or not 0 <= threads <= 64:
            problems.append(f"{prefix}gather_threads must be in [0, 64], got {self.gather_threads}")
        if problems or queue:
            return problems
        return [
            f"{prefix}{problem}"
            for problem in RateLimiter.problems(
                self.min_size, self.samples_per_insert, self.error_buffer, self.capacity
            )
        ]
