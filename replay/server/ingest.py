"""What a shard stores and how an insert message goes in: whole transitions (INSERT) into
a ring of transitions, or frames and records (INSERT_FRAMES) into a frame-stack store.

The shard's loop (``replay.server.shard``) decodes, counts and answers; this module owns the
prioritized store and turns one insert message into stored transitions, or refuses it with
a :class:`ReplayError` that names what was wrong. A refused message changes no stored
transition (frames it brought may stay, unreferenced, until the ring reuses them).
"""

from __future__ import annotations

from replay.errors import ProtocolError
from replay.frames.storage import FrameStackStorage
from replay.protocol import messages
from replay.server.config import ShardConfig
from replay.store.prioritized import PrioritizedReplay
from replay.store.queue import UnrollQueue
from replay.wire.layout import Kind, Message


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
                self.frames, config.capacity, compress=config.compress_frames,
                gather_threads=config.gather_threads,
            )  # fmt: skip
        if config.queue:
            self.replay = UnrollQueue(config.spec, config.capacity, config.replay_share,
                                      seed=config.seed)  # fmt: skip
        else:
            self.replay = PrioritizedReplay(
                config.spec, config.capacity, config.alpha, rng=config.seed, storage=storage
            )
        self.frames_received = 0

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
                    insert.streams, insert.numbers, insert.starts, data=insert.data,
                    offsets=insert.offsets,
                )  # fmt: skip
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
        return {
            "frames_received": self.frames_received,
            "frames_stored": storage.frames_stored,
            "frame_bytes_stored": storage.frame_bytes_stored,
            "transitions_evicted_early": storage.evicted_early,
            "streams_reclaimed": storage.streams.reclaimed,
            "store_nbytes": storage.nbytes,
        }
