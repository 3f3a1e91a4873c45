"""A batch written once: each shard's part goes straight into the batch's own rows.

A batch of Pong is 29 MB of frame stacks. Decoded into arrays of each part, joined into
the batch, then copied into pinned memory for the GPU, it was written three times on the
learner's host, and those copies held the learner to 55 updates/s on an H200. Here the batch's
arrays are taken from :class:`BatchArrays` when its first part arrives (pinned ones from a pool, on
CUDA: ``apex.learning.staging.PinnedBuffers``), and each reply is decoded or copied into the next
free rows as it arrives (:meth:`SampleReply.from_message` with ``out``). The items appear in
the order their parts arrived; the shards, indices and generations that route priorities
back follow the same order.

Everything here runs on the thread that pumps the sampler.
"""

from __future__ import annotations

import numpy as np

from replay.protocol.sample_reply import SampleReply
from replay.sampling.batch_math import ReplayBatch, merge_parts
from replay.store.spec import TransitionSpec
from replay.wire.layout import Message


class BatchArrays:
    """Where a batch's field arrays come from: new numpy arrays, except that the arrays of a
    batch dropped before it was finished are taken again by the next (nothing else holds
    them). ``apex.learning.staging.PinnedArrays`` lends pinned ones instead.
    """

    def __init__(self) -> None:
        self._spare: dict[str, np.ndarray] | None = None

    def take(self, spec: TransitionSpec, rows: int) -> dict[str, np.ndarray]:
        """Arrays ``(rows, *shape)`` of each field of ``spec``, C-contiguous."""
        spare, self._spare = self._spare, None
        if (
            spare is not None
            and list(spare) == list(spec)
            and all(
                spare[name].shape == (rows, *f.shape) and spare[name].dtype == f.dtype
                for name, f in spec.items()
            )
        ):
            return spare
        return {name: np.empty((rows, *field.shape), field.dtype) for name, field in spec.items()}

    def give_back(self, arrays: dict[str, np.ndarray]) -> None:
        """Arrays from :meth:`take` that no batch will use."""
        self._spare = arrays


class BatchAssembly:
    """The rows of one batch, filled part by part.

    Args:
        spec: the batch's fields.
        size: its rows (the batch size).
        buffers: where its arrays come from (taken at the first part).
    """

    def __init__(self, spec: TransitionSpec, size: int, buffers: BatchArrays) -> None:
        self.spec = spec
        self.size = size
        self._buffers = buffers
        self._arrays: dict[str, np.ndarray] | None = None
        self._parts: list[tuple[int, SampleReply]] = []
        self.filled = 0

    def add(self, shard: int, message: Message) -> SampleReply:
        """Decodes ``shard``'s reply into the next free rows.

        Raises:
            ProtocolError: a reply that does not fit the spec or the rows left (the rows
                stay free: a part drawn again elsewhere fills them).
        """
        if self._arrays is None:
            self._arrays = self._buffers.take(self.spec, self.size)
        free = {name: array[self.filled :] for name, array in self._arrays.items()}
        reply = SampleReply.from_message(message, self.spec, free)
        self._parts.append((shard, reply))
        self.filled += len(reply.indices)
        return reply

    def finish(self, live_minima: list[float], beta: float, sequence: int) -> ReplayBatch:
        """The batch, weighted against the smallest priority of any live shard
        (:func:`replay.sampling.batch_math.merge_parts`); call once every part is in."""
        if self._arrays is None or self.filled != self.size:
            raise RuntimeError(f"a batch of {self.size} finished with {self.filled} rows")
        return merge_parts(self._parts, live_minima, beta, sequence, transitions=self._arrays)

    def discard(self) -> None:
        """Gives the arrays back: the batch is dropped."""
        if self._arrays is not None:
            self._buffers.give_back(self._arrays)
            self._arrays = None
