"""Reading a frame store: stacks put together, or left apart for the wire.

The half of ``replay.frames.storage.FrameStackStorage`` that reads; the arrays it reads are
described there. Stacks are put together on a few threads (``replay.store.parts``), each
kernel prefetching the frames ahead of the one it copies (``replay.store.prefetch``).
"""

from __future__ import annotations

import numpy as np

from replay.errors import InvalidIndexError
from replay.frames.kernels import chain_slots, copy_out_blobs, gather_stacks
from replay.frames.payload import FramePayload
from replay.store.parts import run_in_parts
from replay.store.spec import TransitionSpec
from replay.store.storage import BatchBuffers


class FrameStackReader:
    """Gathers from the arrays a :class:`~replay.frames.storage.FrameStackStorage` keeps."""

    _stack: int
    _compress: bool
    _codec: object
    _gather_threads: int
    _arena: np.ndarray
    _positions: np.ndarray
    _lengths: np.ndarray
    _prev: np.ndarray
    _heads: dict[str, np.ndarray]
    _scalar_columns: dict[str, np.ndarray]
    output_spec: TransitionSpec

    def allocate_batch(self, batch_size: int) -> BatchBuffers:
        """Contiguous per-field arrays of :attr:`output_spec` for ``batch_size`` items."""
        return BatchBuffers.allocate(self.output_spec, batch_size)

    def gather_packed(self, slots: np.ndarray) -> tuple[dict[str, np.ndarray], FramePayload]:
        """The items at ``slots`` with their stacks left apart: each distinct frame once
        (as stored, LZ4 or whole) and, per item, the indices of its stacks' frames among
        them, stack after stack in head order, each oldest first (see
        ``replay.frames.payload``)."""
        n, k = slots.size, self._stack
        heads = self._item_heads(slots)
        chains = np.empty((heads.size, k), dtype=np.int64)
        chain_slots(self._prev, heads.reshape(-1), k, chains, 0)
        unique, inverse = np.unique(chains, return_inverse=True)
        offsets = np.zeros(unique.size + 1, dtype=np.int64)
        np.cumsum(self._lengths[unique], out=offsets[1:])
        data = np.empty(offsets[-1], dtype=np.uint8)
        copy_out_blobs(self._arena, self._positions, self._lengths, unique, offsets, data)
        scalars = {name: column[slots] for name, column in self._scalar_columns.items()}
        index = inverse.reshape(n, -1).astype(np.int32)
        return scalars, FramePayload(index, data, offsets, self._compress)

    def _item_heads(self, slots: np.ndarray) -> np.ndarray:
        """``(n, heads)``: the head frames of the items at ``slots``, in head order."""
        return np.concatenate(
            [heads[slots].reshape(slots.size, -1) for heads in self._heads.values()], axis=1
        )

    def gather(self, slots: np.ndarray, out: BatchBuffers | None = None) -> dict[str, np.ndarray]:
        """The items at ``slots`` (sampled, so alive), their stacks put together."""
        n = slots.size
        out = out or self.allocate_batch(n)
        if out.batch_size != n:
            raise InvalidIndexError(f"buffers hold {out.batch_size} items, {n} slots were given")
        k, gather = self._stack, self._codec.gather_compressed if self._compress else gather_stacks
        stored = (self._arena, self._positions, self._lengths, self._prev)
        # Per stack field: its heads, its stacks as rows of bytes (a stack a head), and
        # its heads per item.
        work = []
        for name, heads in self._heads.items():
            each = int(np.prod(heads.shape[1:]))  # 1, or an unroll's T + 1
            target = out.fields[name].reshape(n * each, k, -1).view(np.uint8)
            work.append((heads[slots].reshape(-1), target, each))

        def part(start: int, stop: int) -> None:
            for heads, target, each in work:
                gather(
                    *stored,
                    heads[start * each : stop * each],
                    k,
                    target[start * each : stop * each],
                )

        run_in_parts(n, part, self._gather_threads)
        for name, column in self._scalar_columns.items():
            np.take(column, slots, axis=0, out=out.fields[name])
        return out.fields
