"""Every environment preset builds, and its network and replay spec fit its observations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apex.envs import PRESETS, env_shape, make_env
from apex.networks import build_network
from replay import PrioritizedReplay


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_builds_and_fits_its_network_and_spec(name: str) -> None:
    shape = env_shape(name)
    env = make_env(name, training=True)
    try:
        observation, _ = env.reset(seed=0)
        next_observation, reward, *_ = env.step(env.action_space.sample())
    finally:
        env.close()
    assert observation.shape == shape.observation_shape
    network = build_network(shape.observation_shape, shape.actions, (64, 64))
    q = network(torch.from_numpy(np.stack([observation, next_observation])))
    assert q.shape == (2, shape.actions)
    replay = PrioritizedReplay(shape.transition_spec(), capacity=8, rng=0)
    replay.add(
        {
            "obs": observation[None],
            "action": np.zeros(1, np.int64),
            "reward": np.array([reward], np.float32),
            "discount": np.ones(1, np.float32),
            "next_obs": next_observation[None],
        },
        np.ones(1),
    )
    assert replay.size == 1
    if PRESETS[name].atari:
        assert shape.observation_shape == (4, 84, 84) and shape.observation_dtype == np.uint8
