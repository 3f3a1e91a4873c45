"""Convolutions sized to any uint8 image (``apex.algorithms.network_choice``'s rule): the
Nature CNN at Atari sizes, the MinAtar network for grids, channels found by the rule, values
divided by the space's bound; and a grayscale image learned from through the seam."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apex.algorithms.network_choice import image_layout
from apex.algorithms.networks import ImageQNetwork, PolicyValueNet, build_network, image_input
from apex.envs.families import env_shape, make_env


@pytest.mark.parametrize(
    ("shape", "channels", "sides", "channels_last", "torso", "features"),
    [
        ((4, 84, 84), 4, (84, 84), False, "nature", 64 * 7 * 7),  # the ALE pipeline's stacks
        ((84, 84, 4), 4, (84, 84), True, "nature", 64 * 7 * 7),
        ((210, 160, 3), 3, (210, 160), True, "nature", 64 * 7 * 7),  # pooled from 22x16
        ((3, 64, 64), 3, (64, 64), False, "nature", 64 * 4 * 4),
        ((36, 36), 1, (36, 36), False, "nature", 64),
        ((10, 10, 4), 4, (10, 10), True, "grid", 16 * 8 * 8),  # MinAtar's planes
        ((10, 10, 10), 10, (10, 10), True, "grid", 16 * 8 * 8),  # Seaquest's ten
        ((12, 12), 1, (12, 12), False, "grid", 16 * 10 * 10),
        ((1, 12, 20), 1, (12, 20), False, "grid", 16 * 10 * 18),
        ((8, 8, 8), 8, (8, 8), True, "grid", 16 * 6 * 6),  # a tie is gymnasium's (h, w, c)
        ((35, 40, 3), 3, (35, 40), True, "grid", 16 * 33 * 38),  # the smaller side decides
    ],
)
def test_every_image_gets_convolutions_by_the_documented_rule(
    shape, channels, sides, channels_last, torso, features
) -> None:
    layout = image_layout(shape)
    assert (layout.channels, (layout.height, layout.width)) == (channels, sides)
    assert (layout.channels_last, layout.torso, layout.features) == (channels_last, torso, features)
    network = build_network(shape, 5, (64,))
    assert isinstance(network, ImageQNetwork)
    assert network.head.value[0].in_features == features
    assert network.head.value[0].out_features == (512 if torso == "nature" else 128)
    batch = torch.randint(0, 256, (3, *shape), dtype=torch.uint8)
    assert network(batch).shape == (3, 5)
    logits, values = PolicyValueNet(shape, 5, (64,))(batch)
    assert logits.shape == (3, 5) and values.shape == (3,)


@pytest.mark.parametrize("shape", [(3, 3), (3, 40), (40, 3, 2), (84,) * 4, (5, 5, 5, 5)])
def test_images_too_small_or_of_other_ranks_get_no_built_in_network(shape) -> None:
    assert image_layout(shape) is None
    with pytest.raises(ValueError, match="no network for observations of shape"):
        build_network(shape, 2, (16,))


def test_at_atari_and_minatar_sizes_the_networks_are_the_papers() -> None:
    """The Nature CNN's three convolutions and 512 units over (4, 84, 84); MinAtar's one 3x3
    convolution of 16 channels and 128 units over (10, 10, c): no pooling in either."""
    nature = build_network((4, 84, 84), 6, (256,))
    convolutions = [layer for layer in nature.torso if isinstance(layer, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convolutions] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    assert not any(isinstance(layer, torch.nn.AdaptiveAvgPool2d) for layer in nature.torso)
    minatar = build_network((10, 10, 4), 3, (256,), observation_high=1.0)
    [convolution] = [layer for layer in minatar.torso if isinstance(layer, torch.nn.Conv2d)]
    assert (convolution.in_channels, convolution.out_channels) == (4, 16)
    assert convolution.kernel_size == (3, 3) and convolution.stride == (1, 1)
    assert minatar.head.value[0].in_features == 1024


def test_values_reach_the_network_in_zero_to_one_by_the_space_s_bound() -> None:
    """Pixels of 0-255 are divided by 255, planes of 0/1 by 1: both arrive in [0, 1], and
    channels-last images arrive channels-first."""
    pixels = torch.full((2, 12, 12, 3), 255, dtype=torch.uint8)
    planes = torch.ones((2, 12, 12, 3), dtype=torch.uint8)
    for batch, high in ((pixels, 255.0), (planes, 1.0)):
        inputs = image_input(batch, image_layout(batch.shape[1:], high))
        assert inputs.shape == (2, 3, 12, 12) and float(inputs.max()) == 1.0
    assert env_shape("MinAtar/Breakout-v1").observation_high == 1.0
    assert env_shape("tests.space_envs:Pixels-v0").observation_high == 255.0


def test_a_grayscale_image_env_is_learned_from_with_the_built_in_convolutions() -> None:
    """The 12x12 image of ``tests.space_envs:Pixels-v0`` (the lit column is the action that
    pays) through the algorithm seam: the actor's built-in network acts on the env's own
    observations, and a learner trained on them acts right on nearly every one."""
    from apex.algorithms.registry import build_acting, build_algorithm, network_problems
    from apex.learning.staging import DeviceBatch
    from launch.config import resolve

    name = "tests.space_envs:Pixels-v0"
    config = resolve({"env": name, "learner": {"learning_rate": 1e-3}})
    shape = env_shape(name)
    assert network_problems(config.learner, shape) == []
    env = make_env(name, training=True)
    rng = np.random.default_rng(0)
    observations, lights = [], []
    observation, _ = env.reset(seed=0)
    for _ in range(256):
        observations.append(observation)
        lights.append(int(np.flatnonzero(observation[0])[0]) // 4)
        observation, *_ = env.step(int(rng.integers(3)))
    env.close()
    observations = np.stack(observations)
    acting = build_acting(config.actor_config(0), config.algorithms, shape)
    assert acting.policy.values(observations[:4]).shape == (4, 3)
    learner = build_algorithm(config.learner, config.algorithms, shape, torch.device("cpu"))
    torch.manual_seed(0)
    for _ in range(150):
        rows = rng.integers(len(observations), size=32)
        actions = rng.integers(3, size=32)
        batch = {
            "obs": observations[rows],
            "action": actions,
            "reward": np.where(actions == np.asarray(lights)[rows], 1.0, -1.0),
            "discount": np.zeros(32),
            "next_obs": observations[rows],
        }
        tensors = {key: torch.as_tensor(value) for key, value in batch.items()}
        for key in ("reward", "discount"):
            tensors[key] = tensors[key].float()
        learner.step(DeviceBatch(tensors, torch.ones(32), None))
    acting.policy.load({key: value.numpy() for key, value in learner.policy.state_dict().items()})
    greedy = acting.policy.values(observations).argmax(axis=1)
    assert (greedy == np.asarray(lights)).mean() > 0.95
