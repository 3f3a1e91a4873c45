"""Prioritized experience replay: sum-tree, ring storage, and the prioritized store.

This package imports nothing from the rest of the project (``apex`` and ``launch`` build on
it), so a replay shard can run on a host that has only numpy, numba and pyzmq.
"""

from replay.errors import EmptyReplayError, InvalidBatchError, InvalidPriorityError, ReplayError
from replay.prioritized import PrioritizedReplay, SampledBatch
from replay.spec import FieldSpec, TransitionSpec
from replay.storage import RingStorage
from replay.sum_tree import SumTree

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
