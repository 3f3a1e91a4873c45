"""Every environment preset builds, and its network and replay spec fit its observations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apex.algorithms.networks import ActorCritic, MinAtarCNN, build_network
from apex.envs.families import PRESETS, env_shape, make_env
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
    if PRESETS[name].minatar:  # object planes, channels last, kept whole (not frames)
        assert shape.observation_shape[:2] == (10, 10) and shape.observation_dtype == np.uint8
        assert set(np.unique(observation)) <= {0, 1} and isinstance(network, MinAtarCNN)
        assert PRESETS[name].defaults["replay"]["frames"] is False


def test_the_minatar_network_is_the_paper_s_size() -> None:
    """One 3x3 convolution of 16 channels over 10x10 planes (8x8x16 = 1,024 features),
    then 128 units (here in each of the dueling streams)."""
    network = MinAtarCNN(channels=4, actions=3)
    convolution = network.torso[0]
    assert (convolution.in_channels, convolution.out_channels) == (4, 16)
    assert convolution.kernel_size == (3, 3) and convolution.stride == (1, 1)
    assert network.head.value[0].in_features == 1024 and network.head.value[0].out_features == 128
    planes = torch.zeros((5, 10, 10, 4), dtype=torch.uint8)
    assert network(planes).shape == (5, 3)
