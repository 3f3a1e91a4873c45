"""Every environment preset builds, and its network and replay spec fit its observations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apex.envs import PRESETS, env_shape, make_env
from apex.networks import ActorCritic, build_network
from replay import PrioritizedReplay


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_builds_and_fits_its_network_and_spec(name: str) -> None:
    shape = env_shape(name)
    env = make_env(name, training=True)
    try:
        observation, _ = env.reset(seed=0)
        action = env.action_space.sample()
        next_observation, reward, *_ = env.step(action)
    finally:
        env.close()
    assert observation.shape == shape.observation_shape
    observations = torch.from_numpy(np.stack([observation, next_observation]))
    if shape.continuous:  # Ape-X DPG: the policy's actions lie within the bounds
        network = ActorCritic(shape.observation_shape[0], shape.action_low, shape.action_high,
                              (64, 64))  # fmt: skip
        actions = network(observations).detach().numpy()
        assert actions.shape == (2, shape.actions)
        assert (actions >= shape.action_low).all() and (actions <= shape.action_high).all()
    else:
        network = build_network(shape.observation_shape, shape.actions, (64, 64))
        assert network(observations).shape == (2, shape.actions)
    replay = PrioritizedReplay(shape.transition_spec(), capacity=8, rng=0)
    replay.add(
        {
            "obs": observation[None],
            "action": np.asarray(action)[None].astype(shape.transition_spec()["action"].dtype),
            "reward": np.array([reward], np.float32),
            "discount": np.ones(1, np.float32),
            "next_obs": next_observation[None],
        },
        np.ones(1),
    )
    assert replay.size == 1
    if PRESETS[name].atari:
        assert shape.observation_shape == (4, 84, 84) and shape.observation_dtype == np.uint8
