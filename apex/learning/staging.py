"""Replay batches onto the learner's device: numpy in, torch tensors out.

The sampler (``replay.sampling.sampler``) stays free of torch; it applies a stage function
to each merged batch on whichever thread pumps it. With the background I/O thread on CUDA
that is where the host-to-device copy starts, overlapping the training step. On CUDA the
sampler writes each batch's large fields straight into pinned memory from
:class:`PinnedArrays` (``replay.sampling.assembly``), which is sent with
``non_blocking=True``, so the step that takes it waits only if the copy has not finished
(CUDA orders it before any kernel on the stream); the memory goes back to the pool once
an event recorded after the copy has passed. On the CPU, ``torch.from_numpy`` shares the
memory and costs nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch

from replay.errors import ConfigError
from replay.sampling.assembly import BatchArrays
from replay.sampling.batch_math import ReplayBatch
from replay.store.spec import TransitionSpec


@dataclass
class DeviceBatch:
    """A replay batch as the training step takes it.

    Attributes:
        transitions: ``{field: tensor (batch_size, *shape)}`` on the device.
        weights: float32 importance weights on the device.
        source: the numpy batch, whose shards, indices and generations route the new
            priorities back (``sampler.update_priorities(batch.source, ...)``).
    """

    transitions: dict[str, torch.Tensor]
    weights: torch.Tensor
    source: ReplayBatch


class DeviceStager:
    """Callable that stages a :class:`ReplayBatch` on ``device``.

    Args:
        device: a torch device or its name ("cpu", "cuda", "cuda:1").

    Attributes:
        arrays: on CUDA, the pinned pool the sampler should write batches into
            (``make_sampler(..., stage=stager, arrays=stager.arrays)``); None elsewhere.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._pin = self.device.type == "cuda"
        self.arrays = PinnedArrays(self.device) if self._pin else None

    def __call__(self, batch: ReplayBatch) -> DeviceBatch:
        staged = DeviceBatch(
            transitions={name: self._to_device(a) for name, a in batch.transitions.items()},
            weights=self._to_device(batch.weights),
            source=batch,
        )
        if self.arrays is not None:
            # The pooled rows are reused once the copies have run: the source keeps only
            # the fields that are its own (a pooled one read later would be another batch's).
            pooled = self.arrays.give_back(batch.transitions, copied=True)
            if pooled:
                kept = {n: a for n, a in batch.transitions.items() if n not in pooled}
                staged.source = replace(batch, transitions=kept)
        return staged

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        if self.device.type == "cpu":
            return tensor
        if self._pin and not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)


# A field smaller than this per batch is not pooled: copying it into pinned memory costs
# little, and the learner may read it after the step (the actors' policy versions).
POOL_MIN_BYTES = 1 << 16


class PinnedArrays(BatchArrays):
    """Pinned host memory for the sampler's batches, reused (``replay.sampling.assembly``).
    Fields of at least :data:`POOL_MIN_BYTES` a batch come from a pinned slot; smaller
    ones are new numpy arrays. A slot given back after its batch's copies were enqueued is
    taken again only once an event recorded after them has passed; a slot given back
    unused (a dropped batch) at once. Slots are made as needed: about the sampler's
    prefetch plus the copies in flight. Used from the thread that pumps the sampler only.
    """

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self._free: list[_Slot] = []
        self._lent: dict[int, _Slot] = {}  # keyed by the address of the slot's memory
        self.slots_made = 0

    def take(self, spec: TransitionSpec, rows: int) -> dict[str, np.ndarray]:
        pooled = [name for name, f in spec.items() if rows * f.item_nbytes >= POOL_MIN_BYTES]
        arrays = {}
        if pooled:
            slot = self._free_slot(spec, rows, pooled)
            self._lent[slot.address] = slot
            arrays.update(slot.arrays)
        for name, field in spec.items():
            if name not in arrays:
                arrays[name] = np.empty((rows, *field.shape), field.dtype)
        return {name: arrays[name] for name in spec}

    def give_back(self, arrays: dict[str, np.ndarray], copied: bool = False) -> set[str]:
        """Returns the slot under ``arrays`` (if any) and the names of its fields.
        ``copied``: copies from it were enqueued on the device's current stream, which
        must pass them before the slot is written again."""
        for array in arrays.values():
            slot = self._lent.pop(array.ctypes.data, None)
            if slot is not None:
                slot.copied = None
                if copied:
                    slot.copied = torch.cuda.Event()
                    slot.copied.record(torch.cuda.current_stream(self.device))
                self._free.append(slot)
                return set(slot.arrays)
        return set()

    def _free_slot(self, spec: TransitionSpec, rows: int, pooled: list[str]) -> _Slot:
        key = (tuple((name, spec[name].shape, spec[name].dtype.str) for name in pooled), rows)
        for index, slot in enumerate(self._free):
            if slot.key == key and (slot.copied is None or slot.copied.query()):
                return self._free.pop(index)
        self.slots_made += 1
        return _Slot.make(spec, rows, pooled, key)


@dataclass
class _Slot:
    """One batch's pinned memory: a tensor per pooled field and its numpy view."""

    key: tuple
    tensors: dict[str, torch.Tensor]
    arrays: dict[str, np.ndarray]
    copied: torch.cuda.Event | None = None

    @property
    def address(self) -> int:
        return next(iter(self.arrays.values())).ctypes.data

    @classmethod
    def make(cls, spec: TransitionSpec, rows: int, pooled: list[str], key: tuple) -> _Slot:
        tensors = {
            name: torch.empty(rows * spec[name].item_nbytes, dtype=torch.uint8, pin_memory=True)
            for name in pooled
        }
        arrays = {
            name: tensors[name].numpy().view(spec[name].dtype).reshape(rows, *spec[name].shape)
            for name in pooled
        }
        return cls(key, tensors, arrays)


def device_problems(name: str, prefix: str = "learner.device") -> list[str]:
    """Whether torch here can train on ``name``: the learner's check at its start, and
    ``apex train``'s before anything starts (``launch.preflight``)."""
    if name in ("auto", "cpu"):
        return []
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        return [f"{prefix} {name!r} is not a device torch knows: {exc}"]
    if device.type != "cuda":
        return []
    if not torch.cuda.is_available():
        return [
            f"{prefix} {name!r} asks for CUDA, but torch {torch.__version__} sees no CUDA "
            f"device here (built for CUDA {torch.version.cuda or 'none'}); use auto or "
            "cpu, or install a CUDA build of torch (APEX_TORCH=torch)"
        ]
    if device.index is not None and device.index >= torch.cuda.device_count():
        return [f"{prefix} {name!r}: torch sees {torch.cuda.device_count()} CUDA devices"]
    return []


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when torch sees it, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        ConfigError: a device torch does not see here (:func:`device_problems`).
    """
    problems = device_problems(name)
    if problems:
        raise ConfigError(problems, "learner device")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def uses_io_thread(replay_io: str, device: torch.device) -> bool:
    """Whether the sampler gets a background I/O thread (see ``LearnerConfig.replay_io``):
    on the CPU a second Python thread slows each small step through the GIL; on CUDA the
    thread overlaps staging with the device's work."""
    if replay_io == "auto":
        return device.type != "cpu"
    return replay_io == "thread"


class BatchSource(Protocol):
    """Where the learner's batches come from (``replay.sampling.sampler`` in a run)."""

    def start(
        self, cancelled: threading.Event | None = None, waiting: Callable[[], None] | None = None
    ) -> bool:
        """Waits until there is data to sample; False if ``cancelled`` was set first."""

    def next_batch(self, timeout_s: float = 10.0) -> DeviceBatch:
        """The next batch, staged on the learner's device."""

    def update_priorities(self, batch: ReplayBatch, priorities: np.ndarray) -> None:
        """New priorities for ``batch``'s items, one each."""

    def shard_states(self) -> list[dict[str, object]]:
        """Each shard as the source last saw it, with its latest INFO counters."""

    def refresh_infos(self, timeout_s: float = 2.0) -> list[dict[str, object]]:
        """:meth:`shard_states` after asking every shard for fresh counters."""

    def close(self) -> None:
        """Stops the source's I/O."""
