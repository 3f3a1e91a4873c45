"""The arithmetic of sampling across shards, as pure functions (no sockets, no state).

Exact sampling across shards. With ``q`` the stored priorities (``p^α``) and ``Q_s`` the
mass of shard ``s`` (``Q = Σ_s Q_s``), one store holding all the data would draw item ``i``
with ``P(i) = q_i / Q``. For a batch of ``B`` the sampler draws ``B`` stratified targets
over ``[0, Q)`` and counts how many land in each shard's slice of that range
(:func:`split_counts`); shard ``s`` then draws that many, stratified over its own mass. A
stratified target lands in a slice of length ``Q_s`` with expected count exactly
``B·Q_s/Q``, and a shard's stratified draws pick ``i`` with expected count ``k·q_i/Q_s``,
so every item's expected count is ``B·q_i/Q``, as in one store.

The importance weights use the global size and minimum (:func:`merge_parts`):
``w_i = (N·P(i))^-β / max_j w_j = (q_min / q_i)^β`` with ``q_min`` the smallest positive
priority over all shards. A shard weighs by its own minimum ``q_s`` as ``(q_s / q_i)^β``;
multiplying by ``(q_min / q_s)^β`` gives ``(q_min / q_i)^β``. The masses and minima come
from each shard's latest reply, so they lag by at most the sampler's prefetch; with static
priorities the result is exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from replay.protocol.sample_reply import SampleReply


@dataclass
class ReplayBatch:
    """One prioritized batch merged from its shards' parts (numpy arrays).

    Attributes:
        transitions: ``{field: array (batch_size, *shape)}``.
        weights: float32 importance weights ``(q_min / q_i)^β``.
        shards: int32 shard of each item, for routing priority updates.
        indices: int64 slot of each item within its shard.
        generations: int64 generation of each slot when sampled.
        priorities: float64 stored priorities ``p^α`` at sampling time.
        sequence: batch number, in the order batches were requested.
    """

    transitions: dict[str, np.ndarray]
    weights: np.ndarray
    shards: np.ndarray
    indices: np.ndarray
    generations: np.ndarray
    priorities: np.ndarray
    sequence: int = 0


def split_counts(masses: np.ndarray, count: int, uniforms: np.ndarray) -> np.ndarray | None:
    """How many of ``count`` stratified targets over ``[0, Σ masses)`` land in each shard's
    slice. O(count + shards).

    Args:
        masses: each shard's priority mass ``Q_s`` (0 for a shard not to be used).
        count: the batch size ``B``.
        uniforms: ``count`` draws from U[0, 1), one per stratum.

    Returns:
        int64 counts per shard summing to ``count``, or None if no shard has mass.
    """
    masses = np.asarray(masses, dtype=np.float64)
    total = masses.sum()
    if not total > 0:
        return None
    # Over shares of the total, not the masses themselves: tiny masses (denormals) would
    # round every target to 0.
    targets = (np.arange(count) + uniforms) / count
    owner = np.searchsorted(np.cumsum(masses / total), targets, side="right")
    # A target at the very top (rounding) belongs to the last shard with mass.
    owner = np.minimum(owner, np.flatnonzero(masses > 0)[-1])
    return np.bincount(owner, minlength=len(masses))


def merge_parts(
    parts: Sequence[tuple[int, SampleReply]],
    live_minima: Iterable[float],
    beta: float,
    sequence: int = 0,
    transitions: dict[str, np.ndarray] | None = None,
) -> ReplayBatch:
    """One batch from its parts, weighted against the smallest priority anywhere.

    Args:
        parts: ``(shard index, reply)`` per part, in the order items should appear.
        live_minima: the smallest positive priority ``q_s`` of every live shard with mass
            (the sampled distribution spans them all, even those with no item here).
        beta: the importance-sampling exponent the parts were weighted with.
        sequence: the batch's number.
        transitions: the parts' fields already in the batch's rows, in the parts' order
            (``replay.sampling.assembly``); None: joined here from the replies.
    """
    replies = [reply for _, reply in parts]
    global_min = min([*live_minima, *(r.min_priority for r in replies)])
    if (
        transitions is None
        and len(parts) == 1
        and all(a.flags.writeable for a in replies[0].fields.values())
    ):
        # One shard's part, already in arrays of its own (a frame shard's stacks, put
        # together on receipt): used as they are, not copied again (29 MB of Pong).
        ((shard, reply),) = parts
        return ReplayBatch(
            transitions=dict(reply.fields),
            weights=reply.weights * np.float32((global_min / reply.min_priority) ** beta),
            shards=np.full(len(reply.indices), shard, dtype=np.int32),
            indices=reply.indices,
            generations=reply.generations,
            priorities=reply.priorities,
            sequence=sequence,
        )
    weights = np.concatenate(
        [r.weights * np.float32((global_min / r.min_priority) ** beta) for r in replies]
    )
    if transitions is None:
        names = list(replies[0].fields)
        transitions = {name: np.concatenate([r.fields[name] for r in replies]) for name in names}
    return ReplayBatch(
        transitions=transitions,
        weights=weights,
        shards=np.concatenate(
            [np.full(len(r.indices), shard, dtype=np.int32) for shard, r in parts]
        ),
        indices=np.concatenate([r.indices for r in replies]),
        generations=np.concatenate([r.generations for r in replies]),
        priorities=np.concatenate([r.priorities for r in replies]),
        sequence=sequence,
    )
