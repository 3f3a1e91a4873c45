"""Greedy evaluation on environments of its own, one batched forward pass per step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from apex.envs import env_factories


def evaluate(
    network: torch.nn.Module, env: str, episodes: int, seed: int, device: torch.device
) -> np.ndarray:
    """Returns of ``episodes`` greedy episodes, run side by side (one per sub-env), with
    unclipped rewards. Each sub-env plays exactly one episode."""
    envs = gym.vector.SyncVectorEnv(
        env_factories(env, episodes, training=False),
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    was_training = network.training
    network.eval()
    try:
        observations, _ = envs.reset(seed=[seed + e for e in range(episodes)])
        while running.any():
            with torch.no_grad():
                tensor = torch.from_numpy(observations).to(device)
                actions = network(tensor).argmax(dim=1).cpu().numpy()
            observations, rewards, terminated, truncated, _ = envs.step(actions)
            returns += rewards * running
            running &= ~np.logical_or(terminated, truncated)
    finally:
        envs.close()
        network.train(was_training)
    return returns
