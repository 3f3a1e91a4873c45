"""Where an actor sends: each shard's endpoints, and how long a batch may wait for one.

Apart from the insert client so that a process that only names shards (the supervisor,
the Slurm layout, the option parser) does not import the client's protocol and its numba
kernels."""

from __future__ import annotations

from dataclasses import dataclass

REROUTE_AFTER_S = 60.0
"""A shard silent this long while others answer is given up, and what the client kept for
it goes to the others; longer than a supervisor takes to bring a shard back."""


@dataclass(frozen=True)
class ShardEndpoints:
    """Where one shard listens: ``insert`` (PULL) and ``request`` (ROUTER)."""

    insert: str
    request: str
