"""The weights of a run's best evaluation and confirmed solve, kept by its evaluator
(``apex.learning.kept_weights``): written whole or not at all, read without pickle, the
best replaced only by a better one."""

from __future__ import annotations

import numpy as np
import pytest

from apex.learning.kept_weights import BEST_FILE, SOLVED_FILE, KeptWeights, read, write


def _facts(mean: float, version: int = 3) -> dict:
    return {
        "version": version,
        "env_steps": 100,
        "mean": mean,
        "episodes": 20,
        "confirmation": False,
    }


def test_kept_weights_come_back_as_written_and_damage_is_refused(tmp_path) -> None:
    arrays = {"0.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "0.bias": np.ones(2)}
    write(tmp_path / "w.npz", arrays, _facts(480.0))
    read_arrays, facts = read(tmp_path / "w.npz")
    assert facts == _facts(480.0) and set(read_arrays) == set(arrays)
    np.testing.assert_array_equal(read_arrays["0.weight"], arrays["0.weight"])
    data = (tmp_path / "w.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a file of kept weights"):
        read(tmp_path / "cut.npz")
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="not a file of kept weights"):
        read(tmp_path / "objects.npz")


def test_the_best_is_replaced_only_by_a_better_one_also_after_a_restart(tmp_path) -> None:
    arrays = {"w": np.zeros(2, np.float32)}
    kept = KeptWeights(tmp_path)
    kept.periodic(arrays, _facts(200.0, version=1))
    kept.periodic(arrays, _facts(150.0, version=2))
    assert read(tmp_path / BEST_FILE)[1]["version"] == 1
    again = KeptWeights(tmp_path)  # the evaluator restarted: the bar stays
    again.periodic(arrays, _facts(180.0, version=4))
    again.periodic(arrays, _facts(210.0, version=5))
    assert read(tmp_path / BEST_FILE)[1]["version"] == 5
    again.solved(arrays, {**_facts(480.0, version=6), "confirmation": True})
    assert read(tmp_path / SOLVED_FILE)[1]["confirmation"] is True
    assert not list(tmp_path.glob("*.tmp"))
