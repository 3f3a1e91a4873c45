"""A learner's update captured once in a CUDA graph, then replayed for each batch.

Why: on a GPU, DQN's update is bound by the host launching its kernels, not by the device:
4-6 ms of Python, autograd and launches for well under a millisecond of a Nature CNN's
work at batch 512. A graph records the launches of the forward pass, the backward pass,
the clipping and fused Adam once; a replay is one call.

What a graph fixes, and how each is kept right:

- Memory: the batch is copied into static tensors before each replay (a device-to-device
  copy, ordered after the stager's own); the outputs are static too and are read back
  before the next replay. The networks' parameters and Adam's moments stay where they
  are: loading a checkpoint, the target copy and a solve's restart write into them in
  place (``load_state_dict`` copies).
- The step size: Adam reads it from a device tensor set before each replay
  (``Adam.keep_learning_rate_on_device``), so a schedule still applies.
- The batch's shapes and dtypes: a batch that differs is the caller's to run eagerly.

The first updates run eagerly (the caller's, on :meth:`GraphedUpdate.eager_stream`: a side
stream while warming up, for cuBLAS's lazy start and cuDNN's choice of algorithms, as
torch's guide to graphs asks); a capture that fails is logged and every update is eager
from then on. Capturing records without running, so each batch is still trained on once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from apex.algorithms.optimizer import Adam

logger = logging.getLogger(__name__)

WARMUP_UPDATES = 3

# One update on static inputs: it steps the optimizer and returns the batch's loss, its
# |δ| per item and whether the step was skipped (``apex.algorithms.dqn.learner.DoubleDQN._update``).
Update = Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


class GraphedUpdate:
    """``update`` replayed from a CUDA graph.

    Args:
        update: the update to capture; it must launch work only (no reads back to the host).
        optimizer: the update's Adam, switched to a step size on the device.
        priority_epsilon: added to ``|δ|`` for the new priorities (inside the graph).

    Attributes:
        captured: whether the graph is recorded (after :data:`WARMUP_UPDATES` eager ones).
        failed: the capture failed (logged); every update is eager from then on.
        replays: the updates the graph made.
    """

    def __init__(self, update: Update, optimizer: Adam, priority_epsilon: float) -> None:
        self._update, self._optimizer = update, optimizer
        self._priority_epsilon = priority_epsilon
        optimizer.keep_learning_rate_on_device()
        self._graph: torch.cuda.CUDAGraph | None = None
        self._inputs: dict[str, torch.Tensor] = {}
        self._signature: tuple | None = None
        self._outputs: tuple[torch.Tensor, torch.Tensor] | None = None
        self._warmups = 0
        self.failed = False
        self.replays = 0

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def __call__(
        self, inputs: dict[str, torch.Tensor]
    ) -> tuple[float, float, torch.Tensor, bool] | None:
        """One update on ``inputs``: the loss, the mean ``|δ|``, the new priorities (on
        the CPU, float64) and whether a non-finite loss or gradient skipped the step;
        None if the caller is to run this one eagerly (warming up, another batch shape, a
        failed capture)."""
        if self.failed:
            return None
        signature = tuple((name, tuple(t.shape), t.dtype, t.device) for name, t in inputs.items())
        if self._graph is None:
            if self._warmups < WARMUP_UPDATES:
                self._warmups += 1
                return None
            self._capture(inputs, signature)
            if self._graph is None:
                return None
        elif signature != self._signature:
            return None
        for name, tensor in inputs.items():
            self._inputs[name].copy_(tensor)
        self._optimizer.sync_learning_rate()
        self._graph.replay()
        self.replays += 1
        summary, priorities = self._outputs
        loss, mean_abs_td, skipped = summary.tolist()
        return loss, mean_abs_td, priorities.cpu(), bool(skipped)

    @contextlib.contextmanager
    def eager_stream(self) -> Iterator[None]:
        """Where the caller runs an eager update: a side stream until the graph is taken
        (warming up), the current stream after."""
        if self._graph is not None or self.failed:
            yield
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            yield
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self, inputs: dict[str, torch.Tensor], signature: tuple) -> None:
        self._inputs = {name: torch.empty_like(tensor) for name, tensor in inputs.items()}
        graph = torch.cuda.CUDAGraph()
        # Gradients the backward pass allocates inside the graph's pool are its static ones.
        self._optimizer.zero_grad(set_to_none=True)
        self._optimizer.sync_learning_rate()
        try:
            # thread_local: the sampler thread keeps staging batches while this one records.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                loss, magnitude, skipped = self._update(self._inputs)
                summary = torch.stack([loss.detach(), magnitude.mean(), skipped])
                self._outputs = summary, (magnitude + self._priority_epsilon).double()
        except RuntimeError as exc:
            logger.warning(
                "the update could not be captured in a CUDA graph (%s); training "
                "goes on without one",
                exc,
            )
            self.failed = True
            self._inputs, self._outputs = {}, None
            self._optimizer.zero_grad(set_to_none=True)
            return
        self._graph, self._signature = graph, signature
        logger.info(
            "the update is captured in a CUDA graph (%s)",
            ", ".join(f"{n} {tuple(t.shape)}" for n, t in inputs.items()),
        )
