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

from replay.errors import EmptyReplayError, InvalidBatchError, InvalidPriorityError, ReplayError
from replay.store.prioritized import PrioritizedReplay, SampledBatch
from replay.store.spec import FieldSpec, TransitionSpec
from replay.store.storage import RingStorage
from replay.store.sum_tree import SumTree

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
