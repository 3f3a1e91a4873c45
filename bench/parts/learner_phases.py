"""Where a double-DQN update's time goes, phase by phase (the learner suite's ``phases``).

Each phase is timed as a prefix of the update, synchronised with the device at its end, so
its cost is the difference between two prefixes (milliseconds per update):

    stage       a replay batch onto the device (``apex.learning.staging.DeviceStager``), from the
                arrays the sampler writes it into: on CUDA the stager's pinned slots and a
                non-blocking copy (the sampler decodes replies straight into the slot, so
                staging is the transfer); on the CPU a shared view
    forward     Q(s, a) with its graph, and the double-DQN target under no_grad
    backward    the Huber loss's gradients
    optimizer   the global-norm clip and fused Adam
    read back   the rest of ``apex.algorithms.dqn.learner.dqn_step``: the loss, mean |δ| and new
    priorities
                copied to the host (three waits for the device on CUDA)

``total`` is ``dqn_step`` itself, staging excluded. On CUDA a prefix that ends without a
host copy still ends with ``torch.cuda.synchronize``, so "read back" is what the copies add
beyond waiting for the queued kernels. Run on an H200 (bench/RESULTS.md, "On a GPU"), every
size took 3-6 ms an update, whatever the batch: the host launching kernels, not the GPU.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from apex.algorithms.dqn.learner import dqn_step
from apex.algorithms.networks import build_network
from apex.algorithms.updates import adam
from apex.learning.staging import DeviceStager
from bench.timing import measure_rate
from replay.sampling.batch_math import ReplayBatch
from replay.store.spec import TransitionSpec

PHASES = ("stage", "forward", "backward", "optimizer", "read back")
MAX_GRAD_NORM = 10.0
PRIORITY_EPSILON = 1e-3


def numpy_batch(shape: tuple[int, ...], batch_size: int, seed: int = 0) -> ReplayBatch:
    """A replay batch as the sampler hands it to the stager (uint8 frames or float vectors)."""
    rng = np.random.default_rng(seed)

    def observations() -> np.ndarray:
        if len(shape) == 3:
            return rng.integers(0, 256, (batch_size, *shape), dtype=np.uint8)
        return rng.standard_normal((batch_size, *shape), dtype=np.float32)

    transitions = {
        "obs": observations(),
        "action": rng.integers(0, 6, batch_size).astype(np.int64),
        "reward": rng.standard_normal(batch_size, dtype=np.float32),
        "discount": np.full(batch_size, 0.97, np.float32),
        "next_obs": observations(),
    }
    zeros = np.zeros(batch_size, np.int64)
    return ReplayBatch(
        transitions,
        np.ones(batch_size, np.float32),
        zeros.astype(np.int32),
        zeros,
        zeros,
        np.ones(batch_size),
    )


def in_sampler_arrays(batch: ReplayBatch, stager: DeviceStager) -> ReplayBatch:
    """``batch`` written into the arrays the sampler would have put it in for ``stager``."""
    if stager.arrays is None:
        return batch
    spec = TransitionSpec.from_dict(
        {name: (a.shape[1:], a.dtype) for name, a in batch.transitions.items()}
    )
    rows = stager.arrays.take(spec, len(batch.weights))
    for name, array in batch.transitions.items():
        np.copyto(rows[name], array)
    return dataclasses.replace(batch, transitions=rows)


def measure_phases(
    shape: tuple[int, ...],
    hidden: tuple[int, ...],
    batch_size: int,
    device: torch.device,
    timing: dict,
) -> dict[str, float]:
    """Milliseconds per update of each phase in :data:`PHASES`, and ``total`` (the whole
    ``dqn_step``, staging excluded)."""
    online = build_network(shape, 6, hidden).to(device)
    target = copy.deepcopy(online)
    optimizer = adam(online.parameters(), 1e-4, 1.5e-4)
    stager = DeviceStager(device)
    source = in_sampler_arrays(numpy_batch(shape, batch_size), stager)
    staged = stager(source)
    batch, weights = staged.transitions, staged.weights

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def forward() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        actions = batch["action"].long().unsqueeze(1)
        q_taken = online(batch["obs"]).gather(1, actions).squeeze(1)
        with torch.no_grad():
            best = online(batch["next_obs"]).argmax(dim=1, keepdim=True)
            next_value = target(batch["next_obs"]).gather(1, best).squeeze(1)
            targets = batch["reward"] + batch["discount"] * next_value
        loss = (weights * nn.functional.huber_loss(q_taken, targets, reduction="none")).mean()
        return loss, targets - q_taken, q_taken

    def backward() -> tuple[torch.Tensor, torch.Tensor]:
        optimizer.zero_grad(set_to_none=True)
        loss, td, _ = forward()
        loss.backward()
        return loss, td

    def descend() -> tuple[torch.Tensor, torch.Tensor]:
        loss, td = backward()
        nn.utils.clip_grad_norm_(online.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        return loss, td

    def whole_step() -> None:
        dqn_step(online, target, optimizer, batch, weights, MAX_GRAD_NORM, PRIORITY_EPSILON)

    def synced(operation: Callable[[], object]) -> Callable[[], None]:
        def call() -> None:
            operation()
            sync()

        return call

    prefixes = {
        "stage": synced(lambda: stager(source)),
        "forward": synced(forward),
        "backward": synced(backward),
        "optimizer": synced(descend),
        "read back": synced(whole_step),
    }
    warmup = 3 if len(shape) == 3 else 20
    ms = {}
    for name, operation in prefixes.items():
        rate = measure_rate("calls", "calls/s", operation, warmup_calls=warmup, **timing)
        ms[name] = 1000.0 / rate.median
    # A phase smaller than the timing noise between two prefixes shows as 0, not negative.
    return {
        "stage": ms["stage"],
        "forward": ms["forward"],
        "backward": max(0.0, ms["backward"] - ms["forward"]),
        "optimizer": max(0.0, ms["optimizer"] - ms["backward"]),
        "read back": max(0.0, ms["read back"] - ms["optimizer"]),
        "total": ms["read back"],
    }
