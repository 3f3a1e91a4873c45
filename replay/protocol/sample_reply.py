"""SAMPLE_REPLY: one shard's part of a batch (its layout: ``replay.protocol.messages``).

A frame shard's reply carries each sampled frame once; :meth:`SampleReply.from_message`
puts the stacks together, into new arrays or straight into the rows of the batch being
assembled (``replay.sampling.assembly``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from replay.errors import ProtocolError
from replay.frames.payload import FramePayload, unpack
from replay.frames.spec import FrameStackSpec
from replay.protocol.messages import expect_kind
from replay.store.spec import TransitionSpec
from replay.wire.layout import Kind, Message


@dataclass(frozen=True)
class SampleReply:
    """One shard's part of a batch, with the shard's priority statistics.

    Attributes:
        total_priority: the shard's sum of stored priorities ``Q_s``.
        min_priority: its smallest positive stored priority ``q_s``.
        size, capacity: transitions stored and storable.
        indices, generations: the sampled slots and their generations.
        priorities: their stored priorities ``p^α``.
        weights: ``(q_s / q_i)^β``, weighed by this shard's own minimum.
        fields: ``{name: array}`` in spec order (a frame shard's: without obs and
            next_obs, which ``frames`` carries until :meth:`from_message` puts them
            together).
        frames: a frame shard's sampled frames, each once.
    """

    total_priority: float
    min_priority: float
    size: int
    capacity: int
    indices: np.ndarray
    generations: np.ndarray
    priorities: np.ndarray
    weights: np.ndarray
    fields: Mapping[str, np.ndarray]
    frames: FramePayload | None = None

    def to_message(self, sender: int, sequence: int) -> Message:
        stats = np.array(
            [self.total_priority, self.min_priority, self.size, self.capacity], dtype=np.float64
        )
        arrays = (
            stats,
            self.indices,
            self.generations,
            self.priorities,
            self.weights,
            *self.fields.values(),
        )
        scalar = 0.0
        if self.frames is not None:
            arrays += (self.frames.index, self.frames.data, self.frames.offsets)
            scalar = 1.0 if self.frames.compressed else 2.0
        return Message(
            Kind.SAMPLE_REPLY,
            sender,
            sequence,
            count=len(self.indices),
            scalar=scalar,
            arrays=arrays,
        )

    @classmethod
    def from_message(
        cls,
        message: Message,
        spec: TransitionSpec,
        out: Mapping[str, np.ndarray] | None = None,
    ) -> SampleReply:
        """The reply, with a frame shard's stacks put together (``fields`` in spec order).

        Args:
            out: where the fields go, ``{name: array}`` of at least the reply's rows (the
                free rows of a batch being assembled, ``replay.sampling.assembly``): a
                frame shard's stacks are decoded straight into them and other fields
                copied, so the learner's batch is written once. Without it the fields are
                the message's own arrays (stacks put together in new ones).

        Raises:
            ProtocolError: arrays that do not fit ``spec`` (or more rows than ``out`` has).
        """
        expect_kind(message, Kind.SAMPLE_REPLY)
        if message.scalar in (1.0, 2.0):
            return cls._from_frames(message, spec, out)
        if len(message.arrays) != 5 + len(spec):
            raise ProtocolError(
                f"SAMPLE_REPLY has {len(message.arrays)} arrays, expected {5 + len(spec)}"
            )
        stats, indices, generations, priorities, weights, *fields = message.arrays
        if stats.shape != (4,) or stats.dtype != np.float64:
            raise ProtocolError(f"SAMPLE_REPLY stats are {stats.dtype}{stats.shape}, not f64[4]")
        count = indices.shape[0] if indices.ndim == 1 else -1
        for name, array, dtype in (
            ("generations", generations, np.int64),
            ("priorities", priorities, np.float64),
            ("weights", weights, np.float32),
            ("indices", indices, np.int64),
        ):
            if array.dtype != dtype or array.shape != (count,):
                raise ProtocolError(f"SAMPLE_REPLY {name} are {array.dtype}{array.shape}")
        for name, array in zip(spec, fields, strict=True):
            if array.shape[:1] != (count,):
                rows = array.shape[0] if array.ndim else 0
                raise ProtocolError(f"SAMPLE_REPLY field {name} has {rows} rows, not {count}")
            if array.shape[1:] != spec[name].shape or array.dtype != spec[name].dtype:
                raise ProtocolError(
                    f"SAMPLE_REPLY field {name} is {array.dtype}{array.shape[1:]}, expected "
                    f"{spec[name].dtype}{spec[name].shape}"
                )
        placed = dict(zip(spec, fields, strict=True))
        if out is not None:
            rows = _rows_of(out, spec, count)
            for name, array in placed.items():
                if array.ctypes.data != rows[name].ctypes.data:  # stacks are decoded there
                    np.copyto(rows[name], array)
            placed = rows
        total, smallest, size, capacity = stats.tolist()
        return cls(
            total,
            smallest,
            int(size),
            int(capacity),
            indices,
            generations,
            priorities,
            weights,
            placed,
        )

    @classmethod
    def _from_frames(
        cls, message: Message, spec: TransitionSpec, out: Mapping[str, np.ndarray] | None
    ) -> SampleReply:
        layout = FrameStackSpec.from_transition_spec(spec)
        if layout is None:
            raise ProtocolError(f"a frame reply for {spec}, which has no frame stacks")
        stacks = [name for name, _ in layout.stack_fields]
        scalars = [name for name in spec if name not in stacks]
        if len(message.arrays) != 5 + len(scalars) + 3:
            raise ProtocolError(
                f"frame SAMPLE_REPLY has {len(message.arrays)} arrays, expected "
                f"{5 + len(scalars) + 3}"
            )
        *head, index, data, offsets = message.arrays
        payload = FramePayload(index, data, offsets, message.scalar == 1.0)
        # A peer's array may have any rank, none included (a 0-d array has no length).
        if index.ndim == 0 or head[1].ndim == 0 or index.shape[0] != head[1].shape[0]:
            raise ProtocolError(
                f"frame stacks of shape {index.shape} for indices of shape {head[1].shape}"
            )
        rows = None if out is None else _rows_of(out, spec, len(index))
        fields = unpack(payload, layout, rows)
        fields.update(zip(scalars, head[5:], strict=True))
        whole = Message(
            Kind.SAMPLE_REPLY,
            message.sender,
            message.sequence,
            arrays=(*head[:5], *(fields[name] for name in spec)),
        )
        return cls.from_message(whole, spec, rows)


def _rows_of(
    out: Mapping[str, np.ndarray], spec: TransitionSpec, count: int
) -> dict[str, np.ndarray]:
    """The first ``count`` rows of each of ``out``'s arrays, for a reply of ``count`` items."""
    try:
        rows = {name: out[name][:count] for name in spec}
    except KeyError as exc:
        raise ProtocolError(f"no rows for field {exc} to put the reply in") from exc
    for name, array in rows.items():
        if len(array) != count:
            raise ProtocolError(f"a reply of {count} items for {len(array)} free rows")
        if array.shape[1:] != spec[name].shape or array.dtype != spec[name].dtype:
            raise ProtocolError(f"rows of {array.dtype}{array.shape[1:]} for field {name}")
    return rows
