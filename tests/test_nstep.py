"""n-step transitions against hand-computed tables; exploration schedule; networks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apex.algorithms.exploration import actor_epsilon, env_epsilons, epsilon_greedy
from apex.algorithms.networks import build_network
from apex.algorithms.nstep import NStepBuilder

GAMMA = 0.5  # powers of two keep every expected value exact


def run(steps, n=3):
    """Feeds ``(rewards, terminated, truncated)`` per step for 2 envs; obs = 10·env + t."""
    builder = NStepBuilder(2, n, GAMMA, (1,), np.dtype(np.float32))
    emitted = []
    for t, (rewards, terminated, truncated) in enumerate(steps):
        obs = np.array([[t], [10 + t]], dtype=np.float32)
        next_obs = (
            obs
            + 1
            + 100 * np.array([[terminated[0] or truncated[0]], [terminated[1] or truncated[1]]])
        )
        out = builder.step(
            obs,
            np.array([t, t]),
            np.array(rewards, float),
            next_obs,
            np.array(terminated),
            np.array(truncated),
        )
        emitted.append(out)
    return emitted


def rows(out):
    return [
        (float(o[0]), int(a), float(r), float(d), float(s[0]))
        for o, a, r, d, s in zip(
            out["obs"], out["action"], out["reward"], out["discount"], out["next_obs"], strict=True
        )
    ]


def test_no_boundary_gives_full_n_step_returns() -> None:
    out = run(
        [
            ([1, 0], [0, 0], [0, 0]),
            ([2, 0], [0, 0], [0, 0]),
            ([3, 0], [0, 0], [0, 0]),
            ([4, 0], [0, 0], [0, 0]),
        ]
    )
    assert rows(out[0]) == rows(out[1]) == []
    # Step 2 completes the transitions starting at t=0 in both envs.
    assert rows(out[2]) == [
        (0.0, 0, 1 + 0.5 * 2 + 0.25 * 3, 0.125, 3.0),
        (10.0, 0, 0.0, 0.125, 13.0),
    ]
    assert rows(out[3]) == [
        (1.0, 1, 2 + 0.5 * 3 + 0.25 * 4, 0.125, 4.0),
        (11.0, 1, 0.0, 0.125, 14.0),
    ]


def test_termination_flushes_every_pending_start_without_bootstrap() -> None:
    # Env 1 terminates at t=1; its final observation is 10 + 1 + 1 + 100 = 112.
    out = run([([0, 1], [0, 0], [0, 0]), ([0, 2], [0, 1], [0, 0]), ([0, 7], [0, 0], [0, 0])])
    assert rows(out[1]) == [(10.0, 0, 1 + 0.5 * 2, 0.0, 112.0), (11.0, 1, 2.0, 0.0, 112.0)]
    # The next episode starts fresh at t=2: nothing from before the boundary is reused.
    assert [r for r in rows(out[2]) if r[0] >= 10] == []


def test_truncation_flushes_with_bootstrap_from_the_final_observation() -> None:
    out = run([([0, 1], [0, 0], [0, 0]), ([0, 2], [0, 0], [0, 1])])
    assert rows(out[1]) == [(10.0, 0, 2.0, 0.25, 112.0), (11.0, 1, 2.0, 0.5, 112.0)]


def test_a_boundary_with_a_full_window_and_episodes_of_one_step() -> None:
    # Env 0: three steps, then terminated at t=3 (4 pending would exceed n: the oldest
    # was emitted at t=2 as a full window). Env 1 ends every step.
    steps = [
        ([1, 5], [0, 1], [0, 0]),
        ([1, 5], [0, 0], [0, 1]),
        ([1, 5], [0, 1], [0, 0]),
        ([1, 5], [1, 0], [0, 1]),
    ]
    out = run(steps)
    assert rows(out[0]) == [(10.0, 0, 5.0, 0.0, 111.0)]
    assert rows(out[1]) == [(11.0, 1, 5.0, 0.5, 112.0)]
    assert rows(out[2]) == [(0.0, 0, 1.75, 0.125, 3.0), (12.0, 2, 5.0, 0.0, 113.0)]
    assert rows(out[3]) == [
        (1.0, 1, 1.75, 0.0, 104.0),
        (2.0, 2, 1.5, 0.0, 104.0),
        (3.0, 3, 1.0, 0.0, 104.0),
        (13.0, 3, 5.0, 0.5, 114.0),
    ]


def test_one_step_transitions() -> None:
    out = run([([3, 4], [0, 1], [0, 0])], n=1)
    assert rows(out[0]) == [(0.0, 0, 3.0, 0.5, 1.0), (10.0, 0, 4.0, 0.0, 111.0)]


def test_ape_x_epsilons() -> None:
    assert actor_epsilon(0, 8) == pytest.approx(0.4)
    assert actor_epsilon(7, 8) == pytest.approx(0.4**8)
    assert actor_epsilon(3, 8) == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert actor_epsilon(0, 1) == 0.4
    with pytest.raises(ValueError, match="outside"):
        actor_epsilon(8, 8)
    rng = np.random.default_rng(0)
    greedy = np.zeros(10_000, dtype=np.int64)
    explored = epsilon_greedy(greedy, 0.3, 4, rng)
    # Random actions equal the greedy one a quarter of the time: 0.3 · 3/4 differ.
    assert abs((explored != 0).mean() - 0.225) < 0.02


def test_every_env_copy_is_an_ape_x_actor_with_its_own_epsilon() -> None:
    # 32 processes of 8 envs: 256 Ape-X actors, each ε_i once over the whole run.
    per_process = [env_epsilons(p, 32, 8) for p in range(32)]
    every = np.sort(np.concatenate(per_process))
    assert np.allclose(every, np.sort([actor_epsilon(i, 256) for i in range(256)]))
    # Interleaved: each process spans the range (its first copy explores most).
    assert all(eps.max() >= 0.4**1.9 and eps.min() <= 0.4**7.1 for eps in per_process)
    assert env_epsilons(0, 1, 1)[0] == 0.4
    rng = np.random.default_rng(1)
    explored = epsilon_greedy(
        np.zeros((20_000,), dtype=np.int64), np.tile([0.0, 1.0], 10_000), 2, rng
    )
    assert not explored[0::2].any() and abs(explored[1::2].mean() - 0.5) < 0.02


def test_networks_pick_by_observation_shape() -> None:
    mlp = build_network((4,), 2, (64, 64))
    assert mlp(torch.zeros(3, 4)).shape == (3, 2)
    cnn = build_network((4, 84, 84), 6, (64,))
    assert cnn(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 6)
    with pytest.raises(ValueError, match="no network"):
        build_network((3, 5), 2, (64,))
