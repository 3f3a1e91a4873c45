"""Unrolls from lock-step vector-env steps, against a per-env reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from apex.algorithms.impala.unrolls import UnrollBuilder


def _episodes(rng: np.random.Generator, envs: int, steps: int):
    """Random steps of ``envs`` envs with SAME_STEP autoreset: where an episode ends,
    the next observation is a fresh reset one and the final one is reported aside."""
    observations = rng.normal(size=(steps + 1, envs, 3)).astype(np.float32)
    terminated = rng.uniform(size=(steps, envs)) < 0.08
    truncated = np.logical_and(rng.uniform(size=(steps, envs)) < 0.05, ~terminated)
    finals = rng.normal(size=(steps, envs, 3)).astype(np.float32)
    return {
        "obs": observations,
        "action": rng.integers(0, 4, (steps, envs)),
        "reward": rng.normal(size=(steps, envs)),
        "terminated": terminated,
        "truncated": truncated,
        "log_prob": np.log(rng.uniform(0.1, 1.0, (steps, envs))),
        "final_value": rng.normal(size=(steps, envs)),
        "final_obs": finals,
    }


def test_unrolls_hold_each_envs_steps_with_cuts_at_episode_ends():
    rng = np.random.default_rng(0)
    envs, length, gamma, steps = 3, 5, 0.9, 23
    data = _episodes(rng, envs, steps)
    builder = UnrollBuilder(envs, length, gamma, (3,), np.dtype(np.float32))
    emitted = []
    for t in range(steps):
        out = builder.step(
            data["obs"][t],
            data["action"][t],
            data["reward"][t],
            data["obs"][t + 1],
            data["terminated"][t],
            data["truncated"][t],
            data["log_prob"][t],
            data["final_value"][t],
            100 + t,
        )
        if out is None:
            assert builder.position == (t + 1) % length
        else:
            emitted.append((t, out))
    assert [t for t, _ in emitted] == [4, 9, 14, 19]  # the last 3 steps are in progress
    for k, (_, out) in enumerate(emitted):
        start = k * length
        window = slice(start, start + length)
        assert out["version"].tolist() == [100 + start] * envs  # the version it began with
        for e in range(envs):
            np.testing.assert_array_equal(out["obs"][e], data["obs"][start : start + length + 1, e])
            np.testing.assert_array_equal(out["action"][e], data["action"][window, e])
            np.testing.assert_allclose(out["log_prob"][e], data["log_prob"][window, e], rtol=1e-6)
            for i in range(length):
                t = start + i
                ended = data["terminated"][t, e] or data["truncated"][t, e]
                assert out["discount"][e, i] == pytest.approx(0.0 if ended else gamma)
                expected = data["reward"][t, e]
                if data["truncated"][t, e]:  # the time limit's bootstrap, folded in
                    expected += gamma * data["final_value"][t, e]
                assert out["reward"][e, i] == pytest.approx(expected, rel=1e-5)
    # One observation shared: the bootstrap of one unroll is the first of the next.
    for (_, first), (_, second) in itertools.pairwise(emitted):
        np.testing.assert_array_equal(first["obs"][:, -1], second["obs"][:, 0])


def test_emitted_unrolls_are_copies_and_bad_settings_are_refused():
    builder = UnrollBuilder(2, 1, 0.99, (2,), np.dtype(np.uint8))
    ones, zeros = np.ones((2, 2), np.uint8), np.zeros((2, 2), np.uint8)
    no = np.zeros(2, bool)
    first = builder.step(ones, np.array([1, 2]), np.zeros(2), zeros, no, no, np.zeros(2))
    second = builder.step(zeros, np.array([3, 0]), np.zeros(2), ones, no, no, np.zeros(2))
    assert first["obs"][:, 0].tolist() == [[1, 1], [1, 1]]  # not overwritten by the second
    assert first["action"].tolist() == [[1], [2]] and second["action"].tolist() == [[3], [0]]
    with pytest.raises(ValueError, match="final value"):
        builder.step(
            ones, np.array([0, 0]), np.zeros(2), zeros, no, np.array([True, False]), np.zeros(2)
        )
    with pytest.raises(ValueError, match="length"):
        UnrollBuilder(2, 0, 0.99, (2,), np.dtype(np.uint8))
    with pytest.raises(ValueError, match="gamma"):
        UnrollBuilder(2, 5, 1.5, (2,), np.dtype(np.uint8))


def test_an_episode_both_terminated_and_truncated_needs_no_final_value():
    # CartPole's pole can fall on step 500: terminated and truncated in one step. No value
    # to bootstrap from; an actor used to die on it ("its final value is needed").
    builder = UnrollBuilder(2, 2, 0.9, (3,), np.dtype(np.float32))
    observations = np.zeros((2, 3), np.float32)
    both = np.array([True, False])
    builder.step(
        observations,
        np.array([0, 1]),
        np.array([1.0, 1.0]),
        observations,
        both,
        both,
        np.zeros(2),
        None,
        7,
    )
    out = builder.step(
        observations,
        np.array([0, 1]),
        np.array([1.0, 1.0]),
        observations,
        np.zeros(2, bool),
        np.zeros(2, bool),
        np.zeros(2),
        None,
        7,
    )
    assert out["reward"][0].tolist() == [1.0, 1.0]  # nothing folded in
    assert out["discount"][0].tolist() == pytest.approx([0.0, 0.9])
    # A truncation alone still needs the actor's value of its final observation.
    cut = np.array([False, True])
    with pytest.raises(ValueError, match="final value is needed"):
        builder.step(
            observations,
            np.array([0, 1]),
            np.array([1.0, 1.0]),
            observations,
            np.zeros(2, bool),
            cut,
            np.zeros(2),
            None,
            7,
        )
