"""A shard's snapshots: its whole state, written by a forked child while it keeps serving.

What: the store (storage arrays and generations, frames and their links for a frame
store), the sum-tree's leaves, the sampler's generator, the rate limiter's counts, the
service counters and the per-sender counters (``replay.store.state``), in the format of
``replay.store.snapshot``.

When: every ``snapshot_interval_s``, on request (SNAPSHOT on the ROUTER), and when the
shard stops (SIGTERM, SIGINT): that last one in the shard process itself, once any child
in flight is done, so what it holds at the signal is what is written.

How, without stopping the service: ``os.fork()``. The child sees the parent's memory as
it was at the fork (copy-on-write: the kernel copies a page only when the parent writes
it), writes it out and leaves with ``os._exit``; the parent only reaps it (``waitpid``
without waiting) in its loop. Redis's BGSAVE works the same way. The child touches
neither the sockets nor numba: it writes arrays and a manifest.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from replay.errors import ConfigError, SnapshotError
from replay.store.prioritized import PrioritizedReplay
from replay.store.queue import UnrollQueue
from replay.store.snapshot import (
    Snapshot,
    complete_snapshots,
    load_newest,
    open_snapshot,
    write_snapshot,
)
from replay.store.state import Reader, prefixed, sub_reader

logger = logging.getLogger(__name__)

# How long a stopping shard waits for a snapshot child before it kills it.
CHILD_WAIT_S = 600.0
# Background snapshots go at most this fast (the final one, at a stop, at full speed).
BACKGROUND_BYTES_PER_S = 64e6


def restore_newest(
    root: Path, load: Callable[[Snapshot], None], index: int, size: Callable[[], int]
) -> None:
    """Brings back the newest usable snapshot under ``root`` through ``load``, older ones
    when newer are refused; leaves the shard empty if there is none, and refuses to start
    if there are some and none is usable (starting empty would lose them silently).

    Raises:
        ConfigError: snapshots are there and every one was refused (each reason listed).
    """
    started = time.monotonic()
    snapshot, refused = load_newest(root, load)
    for reason in refused:
        logger.warning("shard %d: snapshot refused: %s", index, reason)
    if snapshot is None and refused:
        raise ConfigError(
            [f"no usable snapshot in {root}: {reason}" for reason in refused], "shard restore"
        )
    if snapshot is None:
        logger.info("shard %d: no snapshot in %s yet, starting empty", index, root)
        return
    logger.info(
        "shard %d: restored %s: %d transitions in %.2f s",
        index,
        snapshot.path,
        size(),
        time.monotonic() - started,
    )


def replay_state(replay: PrioritizedReplay | UnrollQueue) -> tuple[dict, dict]:
    """A prioritized store's arrays and scalars: storage, sum-tree leaves, generator (a
    queue's: storage and cursor)."""
    if isinstance(replay, UnrollQueue):
        return replay.state()
    storage_arrays, storage_meta = replay.storage.state()
    tree_arrays, tree_meta = replay.tree.state(replay.storage.slots_touched)
    arrays = {**prefixed("storage.", storage_arrays), **prefixed("tree.", tree_arrays)}
    meta = {
        "storage": storage_meta,
        "tree": tree_meta,
        "alpha": replay.alpha,
        "rng": replay.rng.bit_generator.state,
        "update_drops": replay.update_drops,
    }
    return arrays, meta


def restore_replay(replay: PrioritizedReplay | UnrollQueue, read: Reader, meta: dict) -> None:
    """Takes back :func:`replay_state`.

    Raises:
        SnapshotError: another alpha, storage or capacity, or an unusable array.
    """
    if isinstance(replay, UnrollQueue):
        replay.restore(read, meta)
        return
    if meta.get("alpha") != replay.alpha:
        raise SnapshotError(f"replay alpha: snapshot {meta.get('alpha')!r}, here {replay.alpha}")
    for part in ("storage", "tree"):
        if not isinstance(meta.get(part), dict):
            raise SnapshotError(f"the snapshot has no {part} settings")
    replay.storage.restore(sub_reader(read, "storage."), meta["storage"])
    replay.tree.restore(sub_reader(read, "tree."), meta["tree"])
    try:
        replay.rng.bit_generator.state = meta.get("rng")
    except (TypeError, ValueError, KeyError) as exc:
        raise SnapshotError(f"the sampler's generator state is unusable: {exc}") from exc
    drops = meta.get("update_drops")
    if not isinstance(drops, dict):  # snapshots from before drops were told apart
        stale = meta.get("dropped_updates")
        drops = {"stale": stale if isinstance(stale, int) else 0}
    replay.update_drops = {k: v for k, v in drops.items() if isinstance(v, int) and v >= 0}


class ShardSnapshots:
    """Takes a shard's snapshots under ``root``: on a period, on request, and at the end.

    Args:
        root: the shard's snapshot directory.
        interval_s: seconds between periodic snapshots; None for none.
        capture: returns the state ``(arrays, meta)``; called in the child.
        shard_index: named in the log.
    """

    def __init__(
        self,
        root: Path,
        interval_s: float | None,
        capture: Callable[[], tuple[dict, dict]],
        shard_index: int,
    ) -> None:
        self._root = root
        self._interval_s = interval_s
        self._capture = capture
        self._index = shard_index
        newest = complete_snapshots(root)
        self._sequence = newest[0][0] + 1 if newest else 1
        self._child: tuple[int, int, float] | None = None  # pid, sequence, started
        self._due = time.monotonic() + interval_s if interval_s else float("inf")
        self._requested = False
        self.written = 0
        self.failed = 0
        self.last: dict | None = None

    def request(self) -> None:
        """Asks for a snapshot as soon as the loop can start one."""
        self._requested = True

    def tick(self) -> None:
        """Reaps a finished child; starts a snapshot when one is due or asked for."""
        if self._child is not None:
            pid, _, _ = self._child
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self._finished(status)
        if self._child is None and (self._requested or time.monotonic() >= self._due):
            self._start()

    def _start(self) -> None:
        sequence = self._sequence
        self._sequence += 1
        self._requested = False
        if self._interval_s:
            self._due = time.monotonic() + self._interval_s
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: write, and leave without running any parent's cleanup
            code = 1
            try:
                # Background work: it runs only when no other process wants the core,
                # and yields at once when the shard's loop wakes (SCHED_IDLE, Linux).
                if hasattr(os, "SCHED_IDLE"):
                    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                else:
                    os.nice(19)
                arrays, meta = self._capture()
                write_snapshot(
                    self._root, sequence, arrays, meta, bytes_per_s=BACKGROUND_BYTES_PER_S
                )
                code = 0
            except BaseException as exc:
                print(f"shard {self._index}: snapshot {sequence} failed: {exc}", file=sys.stderr)
            finally:
                os._exit(code)
        self._child = (pid, sequence, time.monotonic())

    def _finished(self, status: int) -> None:
        _, sequence, started = self._child
        self._child = None
        seconds = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            self.failed += 1
            logger.warning(
                "shard %d: snapshot %d failed (see above); the previous one stays",
                self._index,
                sequence,
            )
            return
        self._record(sequence, seconds, "background")

    def _record(self, sequence: int, seconds: float, how: str) -> None:
        path = self._root / f"snapshot-{sequence:06d}"
        snapshot = open_snapshot(path)
        nbytes = sum(entry.nbytes for entry in snapshot.arrays.values())
        size = (snapshot.meta.get("shard") or {}).get("size")
        self.written += 1
        self.last = {
            "sequence": sequence,
            "seconds": seconds,
            "bytes": nbytes,
            "transitions": size,
            "path": str(path),
            "how": how,
        }
        logger.info(
            "shard %d: snapshot %d written (%s, %.2f s, %.1f MB, %s transitions)",
            self._index,
            sequence,
            how,
            seconds,
            nbytes / 1e6,
            size,
        )

    def final(self) -> None:
        """Waits for a child in flight, then writes the state as it is now, in this
        process (the shard is stopping: nothing else runs)."""
        if self._child is not None:
            pid = self._child[0]
            deadline = time.monotonic() + CHILD_WAIT_S
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self._finished(status)
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    self._child = None
                    break
                time.sleep(0.05)
        sequence = self._sequence
        self._sequence += 1
        started = time.monotonic()
        try:
            arrays, meta = self._capture()
            write_snapshot(self._root, sequence, arrays, meta)
        except SnapshotError as exc:
            self.failed += 1
            logger.error("shard %d: final snapshot failed: %s", self._index, exc)
            return
        self._record(sequence, time.monotonic() - started, "final")

    def counters(self) -> dict[str, object]:
        return {
            "snapshots_written": self.written,
            "snapshots_failed": self.failed,
            "snapshot_in_progress": self._child is not None,
            "last_snapshot": self.last,
        }
