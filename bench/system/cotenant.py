"""A learner's training loop, run as a co-tenant of the process whose unit costs are being
measured: ``python -m bench.system.cotenant ENV HIDDEN`` (widths, comma-separated).

In a whole run on shared cores, a shard or an actor gets the core back after the learner's
time slice with its caches full of the learner's tensors, and pays for that on every
operation. A spinning loop keeps a core busy without touching memory, so it misses this;
this loop does what a learner does (the env's network, Adam, the learner's batch size, on
one thread), so the measured cost is the one a co-located role pays.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator


def learner_network(env: str, hidden: tuple[int, ...]):
    """The torch network a learner of ``env`` with ``hidden`` widths trains and publishes."""
    from apex.algorithms.networks import build_network
    from apex.envs.families import env_shape

    shape = env_shape(env)
    return build_network(shape.observation_shape, shape.actions, hidden)


def train_forever(env: str, hidden: tuple[int, ...]) -> None:
    import torch

    from apex.envs.families import env_shape
    from launch.config import resolve

    torch.set_num_threads(1)
    shape = env_shape(env)
    batch = resolve({"env": env}).learner.batch_size
    network = learner_network(env, hidden)
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-4)
    dtype = torch.uint8 if shape.observation_dtype.kind == "u" else torch.float32
    size = (batch, *shape.observation_shape)
    observations = (
        torch.randint(0, 255, size, dtype=dtype) if dtype == torch.uint8 else torch.randn(size)
    )
    while True:
        loss = network(observations).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


@contextlib.contextmanager
def learner_on_core(
    env: str, hidden: tuple[int, ...], core: int, present: bool = True
) -> Iterator[None]:
    """A training loop of ``env``'s network with ``hidden`` widths pinned to ``core`` for
    the duration (if ``present``), at the default priority (it takes its fair share of the
    core, as a run's learner does)."""
    from bench.workers import REPO_ROOT, worker_env

    if not present:
        yield
        return
    widths = ",".join(map(str, hidden))
    command = [sys.executable, "-m", "bench.system.cotenant", env, widths]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=worker_env(), stdout=subprocess.DEVNULL)
    try:
        os.sched_setaffinity(process.pid, {core})
        yield
    finally:
        process.kill()
        process.wait(10)


if __name__ == "__main__":
    train_forever(sys.argv[1], tuple(int(w) for w in sys.argv[2].split(",")))
