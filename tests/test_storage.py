"""Ring storage: FIFO order, wrap-around, oversize batches, generations, gathering."""

from __future__ import annotations

import numpy as np
import pytest

from replay import RingStorage, TransitionSpec
from replay.errors import InvalidIndexError
from tests.conftest import make_batch


def stored_ids(storage: RingStorage) -> np.ndarray:
    return storage.column("action").copy()


def test_batches_fill_in_order_then_wrap_fifo(small_spec: TransitionSpec) -> None:
    storage = RingStorage(small_spec, capacity=10)
    slots = storage.write(make_batch(small_spec, 7, first_id=0), 7)
    np.testing.assert_array_equal(slots, np.arange(7))
    slots = storage.write(make_batch(small_spec, 6, first_id=7), 6)  # wraps past the end
    np.testing.assert_array_equal(slots, [7, 8, 9, 0, 1, 2])
    np.testing.assert_array_equal(stored_ids(storage), [10, 11, 12, 3, 4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(storage.generations, [10, 11, 12, 3, 4, 5, 6, 7, 8, 9])
    assert storage.size == 10
    assert storage.items_written == 13


def test_a_batch_larger_than_capacity_keeps_its_last_items(small_spec: TransitionSpec) -> None:
    storage = RingStorage(small_spec, capacity=8)
    storage.write(make_batch(small_spec, 3), 3)
    slots = storage.write(make_batch(small_spec, 21, first_id=3), 21)  # items 3..23
    # Item g lives in slot g % 8: the survivors are items 16..23.
    np.testing.assert_array_equal(slots, np.arange(16, 24) % 8)
    np.testing.assert_array_equal(stored_ids(storage), np.arange(16, 24))
    np.testing.assert_array_equal(storage.generations, np.arange(16, 24))
    assert storage.items_written == 24


def test_gather_returns_contiguous_fields_equal_to_the_stored_rows(
    small_spec: TransitionSpec,
) -> None:
    storage = RingStorage(small_spec, capacity=100)
    batch = make_batch(small_spec, 100)
    batch["obs"] = np.random.default_rng(0).random((100, 4), dtype=np.float32)
    storage.write(batch, 100)
    slots = np.array([5, 99, 0, 5, 42], dtype=np.int64)
    gathered = storage.gather(slots)
    for name in small_spec:
        assert gathered[name].flags.c_contiguous
        assert gathered[name].dtype == small_spec[name].dtype
        np.testing.assert_array_equal(gathered[name], batch[name][slots])
    buffers = storage.allocate_batch(slots.size)
    reused = storage.gather(slots[::-1].copy(), buffers)
    np.testing.assert_array_equal(reused["obs"], batch["obs"][slots[::-1]])
    with pytest.raises(InvalidIndexError, match="hold 5 items"):
        storage.gather(slots[:2], buffers)


def test_image_fields_round_trip() -> None:
    spec = TransitionSpec.from_dict({"obs": ((4, 84, 84), "uint8"), "action": ((), "int32")})
    storage = RingStorage(spec, capacity=6)
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (9, 4, 84, 84), dtype=np.uint8)
    storage.write({"obs": frames, "action": np.arange(9, dtype=np.int32)}, 9)
    gathered = storage.gather_checked(np.array([0, 2, 5]))
    np.testing.assert_array_equal(gathered["obs"], frames[[6, 8, 5]])  # slot s holds item 6+…
    np.testing.assert_array_equal(gathered["action"], [6, 8, 5])


def test_unwritten_float_slots_read_as_nan(small_spec: TransitionSpec) -> None:
    storage = RingStorage(small_spec, capacity=4)
    storage.write(make_batch(small_spec, 1), 1)
    assert np.isnan(storage.column("reward")[1:]).all()
    with pytest.raises(InvalidIndexError, match="outside the 1 written"):
        storage.gather_checked(np.array([2]))
