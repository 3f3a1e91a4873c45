"""Prioritized experience replay, grouped by side (each imports only those above it here):

- ``replay.store``: the in-memory prioritized store (specs, ring, sum-tree, snapshots);
- ``replay.wire``: the frame layout, sockets, CURVE security and keys;
- ``replay.frames``: frame-stack storage, every frame kept once;
- ``replay.protocol``: one message class per kind, and the request client;
- ``replay.server``: one shard's loop and what it keeps;
- ``replay.inserts``: the actors' side, the insert client and its lanes;
- ``replay.sampling``: the learner's side, the sampler over every shard.

This package imports nothing from the rest of the project (``apex`` and ``launch`` build on
it), so a replay shard can run on a host that has only numpy, numba and pyzmq.
"""

import importlib

# Where each name the package offers lives. They are imported on first use (PEP 562), so
# that ``from replay.errors import ...`` in a process with no store (a keeper, a CLI
# command, ``apex plot``) does not import numba with the sum-tree (0.3 s of CPU each).
_EXPORTS = {
    "EmptyReplayError": "replay.errors",
    "InvalidBatchError": "replay.errors",
    "InvalidPriorityError": "replay.errors",
    "ReplayError": "replay.errors",
    "PrioritizedReplay": "replay.store.prioritized",
    "SampledBatch": "replay.store.prioritized",
    "FieldSpec": "replay.store.spec",
    "TransitionSpec": "replay.store.spec",
    "RingStorage": "replay.store.storage",
    "SumTree": "replay.store.sum_tree",
}

__all__ = [
    "EmptyReplayError",
    "FieldSpec",
    "InvalidBatchError",
    "InvalidPriorityError",
    "PrioritizedReplay",
    "ReplayError",
    "RingStorage",
    "SampledBatch",
    "SumTree",
    "TransitionSpec",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'replay' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
