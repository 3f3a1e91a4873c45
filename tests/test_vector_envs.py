"""ale-py's C++ vector env against gymnasium's wrapper path: the same seeds and actions
give the same stacks, rewards and episode ends (``apex.envs.vector`` lists the two
differences, and the stacks' padding is made the same)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from apex.envs.families import make_atari
from apex.envs.vector import AtariStacks, actor_envs, evaluation_envs, rom_name

pytest.importorskip("ale_py")

# 200 steps an episode, so that a short test ends a few of them.
SHORT_FRAMES = 800


def _gym_path(count: int, training: bool) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv(
        [
            lambda: make_atari(
                "ALE/Pong-v5", training=training, noop_max=0, max_frames=SHORT_FRAMES
            )
            for _ in range(count)
        ],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


@pytest.mark.slow
@pytest.mark.parametrize("training", [True, False])
def test_atari_vector_env_steps_as_the_gymnasium_wrappers(training: bool) -> None:
    count, steps = 3, 520
    vector = AtariStacks(
        "Pong", count, training=training, threads=2, noop_max=0, max_frames=SHORT_FRAMES
    )
    wrapped = _gym_path(count, training)
    try:
        seeds = [7, 8, 9]
        ours, _ = vector.reset(seed=seeds)
        theirs, _ = wrapped.reset(seed=seeds)
        np.testing.assert_array_equal(ours, theirs)
        rng = np.random.default_rng(0)
        ends = rewarded = 0
        for _ in range(steps):
            actions = rng.integers(0, 6, count)
            ours, our_rewards, our_terminated, our_truncated, our_info = vector.step(actions)
            theirs, rewards, terminated, truncated, info = wrapped.step(actions)
            np.testing.assert_array_equal(ours, theirs)
            np.testing.assert_array_equal(our_rewards, rewards)
            np.testing.assert_array_equal(our_terminated, terminated)
            np.testing.assert_array_equal(our_truncated, truncated)
            for env in np.flatnonzero(np.logical_or(truncated, terminated)):
                np.testing.assert_array_equal(our_info["final_obs"][env], info["final_obs"][env])
                ends += 1
            rewarded += int(np.count_nonzero(rewards))
    finally:
        vector.close()
        wrapped.close()
    # The comparison covered episode ends (and the resets after them) and scoring.
    assert ends >= count * 2
    assert rewarded > 0


def test_an_episode_start_repeats_its_first_frame() -> None:
    envs = AtariStacks("Pong", 2, training=True, threads=1)
    try:
        first, _ = envs.reset(seed=[1, 2])
        for frame in range(1, 4):
            np.testing.assert_array_equal(first[:, frame], first[:, 0])
        second, *_ = envs.step(np.zeros(2, dtype=np.int64))
        # One step in: the first frame three times, then the new one.
        np.testing.assert_array_equal(second[:, :3], first[:, :3])
    finally:
        envs.close()


def test_each_family_gets_its_vector_env() -> None:
    atari = actor_envs("Pong", 2)
    plain = actor_envs("CartPole-v1", 2)
    evaluation = evaluation_envs("Pong", 2)
    try:
        assert isinstance(atari, AtariStacks)
        assert isinstance(evaluation, AtariStacks)
        assert isinstance(plain, gym.vector.SyncVectorEnv)
        assert plain.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
        assert atari.single_action_space.n == 6
    finally:
        atari.close()
        plain.close()
        evaluation.close()


@pytest.mark.parametrize(
    ("gym_id", "rom"),
    [
        ("ALE/Pong-v5", "pong"),
        ("ALE/SpaceInvaders-v5", "space_invaders"),
        ("ALE/MsPacman-v5", "ms_pacman"),
    ],
)
def test_rom_names(gym_id: str, rom: str) -> None:
    assert rom_name(gym_id) == rom
