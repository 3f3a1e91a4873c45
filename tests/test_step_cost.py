"""The scaling benchmark's step cost: a sleep spends wall time and no CPU, a busy-wait
spends the CPU time of its own thread, and neither changes what the env does."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

from bench.scaling.step_cost import StepCost, make

COST_S = 0.02


def _spent(env: gym.Env, steps: int) -> tuple[float, float]:
    """Wall and this thread's CPU seconds of a reset and ``steps`` steps."""
    wall, cpu = time.monotonic(), time.thread_time()
    env.reset(seed=0)
    for _ in range(steps):
        env.step(0)
    return time.monotonic() - wall, time.thread_time() - cpu


def test_a_sleep_spends_wall_time_and_no_cpu() -> None:
    wall, cpu = _spent(make("CartPole-v1", COST_S, "sleep"), 4)
    assert wall >= 5 * COST_S
    assert cpu < 5 * COST_S / 2  # the env's own arithmetic is microseconds


def test_a_busy_wait_spends_its_threads_cpu_time() -> None:
    wall, cpu = _spent(make("CartPole-v1", COST_S, "cpu"), 4)
    assert cpu >= 5 * COST_S and wall >= cpu * 0.99


@pytest.mark.parametrize("kind", ["sleep", "cpu"])
def test_the_env_is_unchanged_under_its_cost(kind: str) -> None:
    plain, slowed = gym.make("CartPole-v1"), make("CartPole-v1", 0.0005, kind)
    rng = np.random.default_rng(0)
    first, _ = plain.reset(seed=3)
    again, _ = slowed.reset(seed=3)
    np.testing.assert_array_equal(first, again)
    for action in rng.integers(2, size=60):
        expected, got = plain.step(int(action)), slowed.step(int(action))
        np.testing.assert_array_equal(expected[0], got[0])
        assert expected[1:4] == got[1:4]
        if expected[2] or expected[3]:
            np.testing.assert_array_equal(plain.reset(seed=4)[0], slowed.reset(seed=4)[0])
    assert slowed.observation_space == plain.observation_space


@pytest.mark.parametrize(
    ("cost_s", "kind", "match"),
    [
        (-0.001, "sleep", "cost_s must be"),
        (2.0, "cpu", "cost_s must be"),
        ("5ms", "sleep", "cost_s must be"),
        (0.001, "gpu", "cost_kind must be one of"),
    ],
)
def test_a_bad_cost_is_refused_with_its_value(cost_s, kind: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make("CartPole-v1", cost_s, kind)
    with pytest.raises(ValueError, match=match):
        StepCost(gym.make("CartPole-v1"), cost_s, kind)
