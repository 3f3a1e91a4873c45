"""What the suites and their worker processes share: the environment a worker is spawned
with, and random batches of transitions. Imports only the standard library and numpy, so
a worker can run under a peer's own interpreter."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent


def worker_env() -> dict[str, str]:
    """This process's environment with the repository on PYTHONPATH, for ``-m bench.…``
    and ``-m launch`` children."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def random_batch(
    fields: Mapping[str, tuple[Sequence[int], str]], count: int, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """``count`` random transitions for ``{name: (shape, dtype)}``: floats in [0, 1),
    integers in [0, 255)."""
    batch = {}
    for name, (shape, dtype_name) in fields.items():
        dtype = np.dtype(dtype_name)
        if dtype.kind == "f":
            batch[name] = rng.random((count, *shape), dtype=np.float32).astype(dtype)
        else:
            batch[name] = rng.integers(0, 255, (count, *shape)).astype(dtype)
    return batch
