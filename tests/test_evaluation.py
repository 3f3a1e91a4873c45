"""Greedy evaluation: one episode per copy, returns summed until each copy's end, on both
kinds of vector env (CartPole's own numpy one and one wrapped env per copy)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from apex.evaluation import evaluate, evaluation_envs


class ConstantPolicy(nn.Module):
    """Q-values that always prefer ``action``."""

    def __init__(self, actions: int, action: int) -> None:
        super().__init__()
        self.preference = torch.zeros(actions)
        self.preference[action] = 1.0

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.preference.expand(observations.shape[0], -1)


class Balancer(nn.Module):
    """Pushes the cart toward the side the pole leans to: CartPole's classic hand-written
    controller, which keeps the pole up for the whole 500 steps from most starts."""

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        angle, angular_velocity = observations[:, 2], observations[:, 3]
        right = (angle + 0.5 * angular_velocity > 0).float()
        return torch.stack((1.0 - right, right), dim=1)


def test_cartpole_evaluates_on_its_own_vector_env() -> None:
    envs = evaluation_envs("CartPole-v1", 3)
    try:
        assert not isinstance(envs, gym.vector.SyncVectorEnv)
    finally:
        envs.close()


@pytest.mark.parametrize("env", ["CartPole-v1", "Acrobot-v1"])
def test_each_copy_plays_exactly_one_episode(env: str) -> None:
    """Pushing one way ends every CartPole episode within a few steps (returns of about
    9), and on Acrobot every episode runs to its 500-step limit at −1 a step: a copy that
    went on past its end, or a reward counted after it, would show."""
    network = ConstantPolicy(gym.make(env).action_space.n, 0)
    returns = evaluate(network, env, 20, seed=5, device=torch.device("cpu"))
    assert returns.shape == (20,)
    if env == "CartPole-v1":
        assert np.all((returns >= 7) & (returns <= 12)), returns
    else:
        assert np.all(returns == -500), returns


def test_a_good_controller_reaches_the_time_limit_and_no_further() -> None:
    returns = evaluate(Balancer(), "CartPole-v1", 20, seed=1, device=torch.device("cpu"))
    assert returns.max() == 500
    assert np.median(returns) == 500


def test_the_same_seed_gives_the_same_returns() -> None:
    network = Balancer()
    first = evaluate(network, "CartPole-v1", 10, seed=3, device=torch.device("cpu"))
    again = evaluate(network, "CartPole-v1", 10, seed=3, device=torch.device("cpu"))
    np.testing.assert_array_equal(first, again)
