"""A user's own env, made by a factory: walk from one corner of a square grid to the other.

Train it with ``apex train examples/grid_world.toml``, or from Python with
``launch.api.train``. The observation is the agent's cell and the goal's, each as two
coordinates in [0, 1]; the actions move up, right, down or left (a wall stops a move).
Reaching the goal pays 1 and ends the episode; every step costs 0.01; an episode lasts
``4 * size`` steps at most (or ``max_steps``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

MOVES = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)])


class GridWorld(gym.Env):
    """The grid of ``size`` cells a side, the goal in the far corner."""

    def __init__(self, size: int = 5, max_steps: int | None = None) -> None:
        if not 2 <= size <= 64:
            raise ValueError(f"size must be in [2, 64], got {size}")
        self.size = size
        self.max_steps = max_steps or 4 * size
        self.observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self._goal = np.array([size - 1, size - 1])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cell = np.array([0, 0])
        self._steps = 0
        return self._observe(), {}

    def step(self, action):
        self._cell = np.clip(self._cell + MOVES[int(action)], 0, self.size - 1)
        self._steps += 1
        home = bool((self._cell == self._goal).all())
        reward = 1.0 if home else -0.01
        return self._observe(), reward, home, self._steps >= self.max_steps, {}

    def _observe(self) -> np.ndarray:
        cells = np.concatenate([self._cell, self._goal]) / (self.size - 1)
        return cells.astype(np.float32)


def best_return(size: int) -> float:
    """The return of the shortest walk: ``2 (size - 1)`` steps, the last one paid 1."""
    return 1.0 - 0.01 * (2 * (size - 1) - 1)


def make(size: int = 5) -> gym.Env:
    """The env factory ``[env] make = "examples.grid_world:make"`` names; ``[env] kwargs``
    are its arguments."""
    return GridWorld(size)
