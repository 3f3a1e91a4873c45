"""What a shard stores and how an insert message goes in: whole transitions (INSERT) into
a ring of transitions, or frames and records (INSERT_FRAMES) into a frame-stack store.

The shard's loop (``replay.server.shard``) decodes, counts and answers; this module owns the
prioritized store and turns one insert message into stored transitions, or refuses it with
a :class:`ReplayError` that names what was wrong. A refused message changes no stored
transition (frames it brought may stay, unreferenced, until the ring reuses them).
"""

from __future__ import annotations

import numpy as np

from replay.errors import ProtocolError, ReplayError
from replay.frames.storage import FrameStackStorage
from replay.protocol import messages
from replay.server.config import ShardConfig
from replay.store.prioritized import PrioritizedReplay
from replay.store.queue import UnrollQueue
from replay.wire.layout import Header, Kind, Message, decode
from replay.wire.packed import join_packed, packed_key

# Packed insert layouts remembered as checked (one per batch size an actor sends).
MAX_GOOD_LAYOUTS = 256


class Ingest:
    """A shard's prioritized store and the one way into it.

    Args:
        config: the shard's settings (``frames`` picks the storage).

    Raises:
        InvalidIndexError: a capacity the storage refuses.
        CodecUnavailable: compressed frames without the lz4 package.
    """

    def __init__(self, config: ShardConfig) -> None:
        self.config = config
        self.frames = config.frames
        storage = None
        if self.frames is not None:
            storage = FrameStackStorage(
                self.frames,
                config.capacity,
                compress=config.compress_frames,
                gather_threads=config.gather_threads,
            )
        if config.queue:
            self.replay = UnrollQueue(
                config.spec, config.capacity, config.replay_share, seed=config.seed, storage=storage
            )
        else:
            self.replay = PrioritizedReplay(
                config.spec, config.capacity, config.alpha, rng=config.seed, storage=storage
            )
        self.frames_received = 0
        self._good_layouts: dict[tuple[bytes, int, int], int] = {}  # and their counts

    @property
    def packs_samples(self) -> bool:
        """Whether SAMPLE replies carry each distinct frame once (``replay.frames.payload``)
        instead of stacks: for compressed frames; whole ones would save one frame in
        eight, at the price of a copy out of the arena."""
        return self.frames is not None and self.config.compress_frames

    @property
    def frame_layout(self) -> dict | None:
        """What SPEC_REPLY tells writers (None: whole transitions)."""
        if self.frames is None:
            return None
        return {"stack": self.frames.stack, "compressed": self.config.compress_frames}

    def groups(self, header: Header) -> bool:
        """Whether a message of ``header`` may be stored with others in one write
        (:meth:`take_group`): whole transitions into a prioritized ring."""
        return header.kind == Kind.INSERT and self.frames is None and not self.config.queue

    def take_group(self, inserts: list[tuple[Header, list]]) -> list[int | ReplayError]:
        """Stores insert messages of whole transitions (``(header, frames)`` each, see
        :meth:`groups`) in one write per layout; returns per message the transitions it
        added, or the error that refused it.

        A shard's cost per small message is Python's, not the bytes': decoding each
        message's arrays, checking them and writing them would cost it more than the
        transport does. So the first message of each packed layout is decoded and checked
        against the spec alone, as :meth:`take` would; the layout (the descriptors, which
        fix every dtype and shape) is then known good, and later messages of it are
        joined without decoding (``replay.wire.packed.join_packed``) into one write and
        one tree update. If a joined batch is refused (a bad priority), each of its
        messages is stored or refused alone.
        """
        results: list[int | ReplayError] = [0] * len(inserts)
        runs: dict[tuple[bytes, int, int], list[int]] = {}
        for position, (header, frames) in enumerate(inserts):
            key = packed_key(frames, header)
            if key is not None and self._good_layouts.get(key) == header.count:
                runs.setdefault(key, []).append(position)
            else:
                results[position] = self._take_alone(frames, key)
        for positions in runs.values():
            run = [inserts[position][1] for position in positions]
            try:
                arrays = join_packed(run, inserts[positions[0]][0])
                self.replay.add(dict(zip(self.config.spec, arrays[:-1], strict=True)), arrays[-1])
            except ReplayError:
                for position in positions:
                    results[position] = self._take_alone(inserts[position][1], None)
            else:
                for position in positions:
                    results[position] = inserts[position][0].count
        return results

    def _take_alone(self, frames: list, key: tuple[bytes, int, int] | None) -> int | ReplayError:
        """Decodes, checks and stores one insert; a packed layout that passes is
        remembered as good (see :meth:`take_group`)."""
        try:
            insert = messages.Insert.from_message(decode(frames), self.config.spec)
            self.config.spec.check_batch(insert.fields)
            priorities = insert.priorities
            self.replay.add(insert.fields, priorities)
        except ReplayError as exc:  # ProtocolError included
            return exc
        if key is not None and priorities.dtype == np.float64 and priorities.ndim == 1:
            if len(self._good_layouts) >= MAX_GOOD_LAYOUTS:
                self._good_layouts.clear()
            self._good_layouts[key] = len(priorities)
        return len(priorities)

    def take(self, message: Message) -> int:
        """Stores one insert message; returns the transitions it added.

        Raises:
            ReplayError: the message does not fit this shard (ProtocolError for its
                layout, InvalidBatchError or InvalidPriorityError for its contents).
        """
        if message.kind == Kind.INSERT and self.frames is None:
            insert = messages.Insert.from_message(message, self.config.spec)
            self.replay.add(insert.fields, insert.priorities)
            return len(insert.priorities)
        if message.kind == Kind.INSERT_FRAMES and self.frames is not None:
            insert = messages.FrameInsert.from_message(message, self.frames)
            if insert.compressed:
                self.replay.add_frames(
                    insert.streams,
                    insert.numbers,
                    insert.starts,
                    data=insert.data,
                    offsets=insert.offsets,
                )
            else:
                self.replay.add_frames(insert.streams, insert.numbers, insert.starts, insert.frames)
            self.frames_received += len(insert.numbers)
            self.replay.add(insert.records, insert.priorities)
            return len(insert.priorities)
        wanted = "INSERT_FRAMES" if self.frames is not None else "INSERT"
        raise ProtocolError(f"{message.kind.name} on a shard that takes {wanted}")

    def counters(self) -> dict[str, object]:
        """Frame counters for INFO (empty for a shard of whole transitions)."""
        if self.frames is None:
            return {}
        storage: FrameStackStorage = self.replay.storage
        queued = {"unrolls_evicted_queued": self.replay.evicted_queued} if self.config.queue else {}
        return {
            **queued,
            "frames_received": self.frames_received,
            "frames_stored": storage.frames_stored,
            "frame_bytes_stored": storage.frame_bytes_stored,
            "transitions_evicted_early": storage.evicted_early,
            "streams_reclaimed": storage.streams.reclaimed,
            "store_nbytes": storage.nbytes,
        }
