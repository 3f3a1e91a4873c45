"""A user's env with a 3-D observation that is not a stack of frames: a 10x10 grid of 4
planes (channels last, as MinAtar's), each plane different, the agent's cell moving with
its actions. Registered as ``tests.grid_env:Grid-v0`` (gymnasium's ``module:Id`` form)."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np

from examples.grid_world import GridWorld

SIZE, PLANES = 10, 4


class Grid(GridWorld):
    """The example's walk to the far corner (+1 there, -0.01 a step), 50 steps at most,
    seen as planes."""

    observation_space = gym.spaces.Box(0, 1, (SIZE, SIZE, PLANES), np.uint8)

    def __init__(self) -> None:
        super().__init__(SIZE, max_steps=50)
        self.observation_space = Grid.observation_space

    def _observe(self) -> np.ndarray:
        planes = np.zeros((SIZE, SIZE, PLANES), np.uint8)
        planes[self._cell[0], self._cell[1], 0] = 1
        planes[SIZE - 1, SIZE - 1, 1] = 1
        planes[:, :, 2] = np.eye(SIZE, dtype=np.uint8)
        planes[self._steps % SIZE, :, 3] = 1
        return planes


gym.register("Grid-v0", entry_point=Grid)


class GridThatFailsToEvaluate(Grid):
    """The grid, except in the evaluator's process, where it cannot be made: an env that
    works for the actors and kills the evaluator at every start."""

    def __init__(self) -> None:
        if "evaluator" in sys.argv:
            raise RuntimeError("this env cannot be evaluated")
        super().__init__()


gym.register("GridThatFailsToEvaluate-v0", entry_point=GridThatFailsToEvaluate)
