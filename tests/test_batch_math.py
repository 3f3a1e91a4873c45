"""The sampler's arithmetic without sockets: splitting a batch over shards by mass, and
merging the parts' weights, against one store that holds everything."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import PrioritizedReplay
from replay.errors import ProtocolError
from replay.protocol.sample_reply import SampleReply
from replay.sampling.assembly import BatchArrays, BatchAssembly
from replay.sampling.batch_math import merge_parts, split_counts
from tests.conftest import SMALL_SPEC, chi2_critical, make_batch
from tests.test_messages import through_the_wire

ALPHA, BETA = 0.6, 0.4
SHARD_ITEMS = (30, 20, 40)
SHARD_SCALE = (1.0, 8.0, 0.3)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(0.0, 1e6), min_size=1, max_size=8),
    st.integers(1, 600),
    st.integers(0, 2**32 - 1),
)
def test_split_counts_add_up_and_follow_mass_within_one_stratum(
    masses: list[float], count: int, seed: int
) -> None:
    masses_array = np.array(masses)
    counts = split_counts(masses_array, count, np.random.default_rng(seed).random(count))
    if masses_array.sum() <= 0:
        assert counts is None
        return
    assert counts.sum() == count and len(counts) == len(masses)
    assert (counts[masses_array == 0] == 0).all()
    # Stratified targets: a slice of x strata holds x targets, give or take the two strata
    # its ends cut.
    expected = count * masses_array / masses_array.sum()
    assert (np.abs(counts - expected) < 2 + 1e-9).all(), (counts, expected)


def stores(rng: np.random.Generator):
    """Three shard stores, and one store holding all of their items; item ``1000·s + k``
    has the same priority in both."""
    shards, whole = [], PrioritizedReplay(SMALL_SPEC, 128, ALPHA, rng=99)
    for index, (count, scale) in enumerate(zip(SHARD_ITEMS, SHARD_SCALE, strict=True)):
        batch = make_batch(SMALL_SPEC, count, first_id=1000 * index)
        priorities = scale * rng.uniform(0.2, 2.0, count)
        shard = PrioritizedReplay(SMALL_SPEC, 64, ALPHA, rng=index)
        shard.add(batch, priorities)
        whole.add(batch, priorities)
        shards.append(shard)
    return shards, whole


def sample_across(shards, rng: np.random.Generator, batch_size: int):
    parts = sampled_parts(shards, rng, batch_size)
    return merge_parts(parts, [s.min_priority for s in shards], BETA)


def sampled_parts(shards, rng: np.random.Generator, batch_size: int):
    """``(shard, SampleReply)`` parts of one batch, as the shards would answer them."""
    masses = np.array([s.total_priority for s in shards])
    parts = []
    for index, count in enumerate(split_counts(masses, batch_size, rng.random(batch_size))):
        if count:
            shard, sample = shards[index], shards[index].sample(int(count), BETA)
            reply = SampleReply(
                shard.total_priority,
                shard.min_priority,
                shard.size,
                shard.capacity,
                sample.indices,
                sample.generations,
                sample.priorities,
                sample.weights,
                sample.transitions,
            )
            parts.append((index, reply))
    return parts


def test_a_batch_assembled_part_by_part_is_the_merged_batch() -> None:
    rng = np.random.default_rng(12)
    shards, _ = stores(rng)
    minima = [s.min_priority for s in shards]
    parts = sampled_parts(shards, rng, 64)
    assert len(parts) == 3
    assembly = BatchAssembly(SMALL_SPEC, 64, BatchArrays())
    for shard, reply in parts:
        assembly.add(shard, through_the_wire(reply.to_message(shard, 1)))
    assembled, merged = assembly.finish(minima, BETA, 5), merge_parts(parts, minima, BETA, 5)
    for name in SMALL_SPEC:
        np.testing.assert_array_equal(assembled.transitions[name], merged.transitions[name])
    for name in ("weights", "shards", "indices", "generations", "priorities", "sequence"):
        np.testing.assert_array_equal(getattr(assembled, name), getattr(merged, name))


def test_a_part_that_does_not_fit_leaves_its_rows_free_and_a_dropped_batch_gives_back() -> None:
    rng = np.random.default_rng(13)
    shards, _ = stores(rng)
    (first, reply), *_ = sampled_parts(shards, rng, 64)
    arrays = BatchArrays()
    assembly = BatchAssembly(SMALL_SPEC, len(reply.indices) + 2, arrays)
    placed = assembly.add(first, through_the_wire(reply.to_message(first, 1))).fields
    with pytest.raises(ProtocolError, match="free rows"):
        assembly.add(first, through_the_wire(reply.to_message(first, 2)))
    assert assembly.filled == len(reply.indices)
    with pytest.raises(RuntimeError, match="finished with"):
        assembly.finish([s.min_priority for s in shards], BETA, 0)
    assembly.discard()
    # A dropped batch's arrays are the next batch's (nothing else holds them), once.
    again = arrays.take(SMALL_SPEC, len(reply.indices) + 2)
    assert all(np.shares_memory(again[name], placed[name]) for name in SMALL_SPEC)
    fresh = arrays.take(SMALL_SPEC, len(reply.indices) + 2)
    assert not np.shares_memory(fresh["action"], placed["action"])


def test_merged_weights_are_the_weights_of_one_store_holding_everything() -> None:
    rng = np.random.default_rng(5)
    shards, whole = stores(rng)
    assert whole.min_priority == min(s.min_priority for s in shards)
    stored = {}  # item id -> p^α in the one store
    everything = whole.sample(4096, BETA)
    for item, value in zip(everything.transitions["action"], everything.priorities, strict=True):
        stored[int(item)] = value
    for _ in range(20):
        batch = sample_across(shards, rng, 64)
        ids = batch.transitions["action"]
        np.testing.assert_array_equal(ids // 1000, batch.shards)
        q = np.array([stored[int(i)] for i in ids])
        np.testing.assert_allclose(batch.priorities, q, rtol=1e-12)
        np.testing.assert_allclose(batch.weights, (whole.min_priority / q) ** BETA, rtol=1e-6)


def test_items_are_drawn_as_often_as_from_one_store() -> None:
    rng = np.random.default_rng(8)
    shards, whole = stores(rng)
    draws = np.zeros(3000)
    batches = 400
    for _ in range(batches):
        np.add.at(draws, sample_across(shards, rng, 64).transitions["action"], 1)
    everything = whole.sample(4096, BETA)
    expected = np.zeros(3000)
    expected[everything.transitions["action"]] = everything.priorities / whole.total_priority
    expected *= batches * 64
    live = expected > 0
    assert (draws[~live] == 0).all()
    statistic = ((draws[live] - expected[live]) ** 2 / expected[live]).sum()
    assert statistic < chi2_critical(int(live.sum()) - 1, 1e-3), statistic
