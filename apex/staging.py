"""Replay batches onto the learner's device: numpy in, torch tensors out.

The sampler (``replay.sampling.sampler``) stays free of torch; it applies a stage function
to each merged batch on whichever thread pumps it. With the background I/O thread on CUDA
that is where the host-to-device copy starts, overlapping the training step: the batch is
copied into pinned memory and sent with ``non_blocking=True``, so the step that takes it
waits only if the copy has not finished (CUDA orders it before any kernel on the stream).
On the CPU, ``torch.from_numpy`` shares the memory and costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from replay.errors import ConfigError
from replay.sampling.batch_math import ReplayBatch


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
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._pin = self.device.type == "cuda"

    def __call__(self, batch: ReplayBatch) -> DeviceBatch:
        return DeviceBatch(
            transitions={name: self._to_device(a) for name, a in batch.transitions.items()},
            weights=self._to_device(batch.weights),
            source=batch,
        )

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        if self.device.type == "cpu":
            return tensor
        if self._pin:
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)


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
        return [f"{prefix} {name!r} asks for CUDA, but torch {torch.__version__} sees no CUDA "
                f"device here (built for CUDA {torch.version.cuda or 'none'}); use auto or "
                "cpu, or install a CUDA build of torch (APEX_TORCH=torch)"]  # fmt: skip
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
