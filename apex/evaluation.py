"""Greedy evaluation on environments of its own, one batched forward pass per step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from apex.envs import env_factories, preset


def evaluation_envs(env: str, count: int) -> gym.vector.VectorEnv:
    """``count`` copies of ``env`` side by side, seeded by ``reset(seed=...)``.

    An environment with a numpy implementation of its own for many copies (CartPole's
    ``vector_entry_point``) gets it: 20 CartPoles step in 61 µs against 208 µs as 20
    separate envs, and evaluation runs on the learner's thread. Atari presets and every
    other id step one wrapped env per copy (copy ``i`` seeded ``seed + i``; the numpy
    version draws every copy's start from one generator seeded ``seed``). Evaluation
    plays one episode per copy, so how a copy resets after it is of no matter.
    """
    chosen = preset(env)
    if not chosen.atari and gym.spec(chosen.gym_id).vector_entry_point is not None:
        return gym.make_vec(chosen.gym_id, num_envs=count, vectorization_mode="vector_entry_point")
    return gym.vector.SyncVectorEnv(env_factories(env, count, training=False))


def evaluate(
    network: torch.nn.Module, env: str, episodes: int, seed: int, device: torch.device
) -> np.ndarray:
    """Returns of ``episodes`` greedy episodes, run side by side (one per sub-env), with
    unclipped rewards. Each sub-env plays exactly one episode. A network with one output
    per discrete action acts by its argmax; a continuous policy's output is the action."""
    envs = evaluation_envs(env, episodes)
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    was_training = network.training
    network.eval()
    try:
        observations, _ = envs.reset(seed=seed)
        while running.any():
            with torch.no_grad():
                tensor = torch.from_numpy(observations).to(device)
                output = network(tensor)
                if isinstance(envs.single_action_space, gym.spaces.Discrete):
                    output = output.argmax(dim=1)
                actions = output.cpu().numpy()
            observations, rewards, terminated, truncated, _ = envs.step(actions)
            returns += rewards * running
            running &= ~np.logical_or(terminated, truncated)
    finally:
        envs.close()
        network.train(was_training)
    return returns
