"""Tasks as a user brings them: envs of their own, with no preset, through gymnasium's
``module:Id`` form (``bench.learning.user_envs:Catch-v0``). They judge the sized defaults
(``apex.algorithms.sized_defaults``), which were set on other tasks.

- ``Catch-v0``: bsuite's Catch on a 12x12 grid seen as a ``(12, 12, 1)`` image of 0/1:
  a ball falls from a random column of the top row, one row a step; the paddle on the
  bottom row moves left, stays or moves right; +1 for a ball caught, -1 for one missed;
  5 balls an episode (55 steps). Random play scores about -4; every ball caught, +5.
- ``CatchVector-v0``: the same, its grid flattened to 144 floats.
- ``CueCorridor-v0``: a cue (one of two) shown on the first step only, then a corridor
  of 12 steps that show only how far along it the agent is; the last action pays +1 if
  it names the cue, else -1. Without memory the best mean is 0; with it, 1.
- ``PointReach-v0``: a point in the square [-1, 1]^2 moved by a bounded 2-D velocity
  toward a goal drawn each episode, rewarded by minus its distance to the goal each of
  50 steps. Random play scores about -54; heading straight for the goal, about -5.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SIDE, BALLS = 12, 5
CORRIDOR = 12
REACH_STEPS = 50


class Catch(gym.Env):
    observation_space = gym.spaces.Box(0, 1, (SIDE, SIDE, 1), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._paddle = SIDE // 2
        self._balls = 0
        self._drop()
        return self._observe(), {}

    def _drop(self) -> None:
        self._ball = [0, int(self.np_random.integers(SIDE))]

    def step(self, action):
        self._paddle = int(np.clip(self._paddle + int(action) - 1, 0, SIDE - 1))
        self._ball[0] += 1
        reward, done = 0.0, False
        if self._ball[0] == SIDE - 1:
            reward = 1.0 if self._ball[1] == self._paddle else -1.0
            self._balls += 1
            done = self._balls == BALLS
            if not done:
                self._drop()
        return self._observe(), reward, done, False, {}

    def _observe(self) -> np.ndarray:
        grid = np.zeros((SIDE, SIDE, 1), np.uint8)
        grid[self._ball[0], self._ball[1], 0] = 1
        grid[SIDE - 1, self._paddle, 0] = 1
        return grid


class CatchVector(Catch):
    observation_space = gym.spaces.Box(0.0, 1.0, (SIDE * SIDE,), np.float32)

    def _observe(self) -> np.ndarray:
        return super()._observe().reshape(-1).astype(np.float32)


class CueCorridor(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = CORRIDOR) -> None:
        self.length = length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue, self._t = int(self.np_random.integers(2)), 0
        return self._observe(), {}

    def step(self, action):
        self._t += 1
        last = self._t == self.length
        reward = (1.0 if int(action) == self._cue else -1.0) if last else 0.0
        return self._observe(), reward, last, False, {}

    def _observe(self) -> np.ndarray:
        observation = np.array([0.0, 0.0, self._t / self.length], np.float32)
        if self._t == 0:
            observation[self._cue] = 1.0
        return observation


class PointReach(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._point = self.np_random.uniform(-1, 1, 2)
        self._goal = self.np_random.uniform(-1, 1, 2)
        return self._observe(), {}

    def step(self, action):
        velocity = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        self._point = np.clip(self._point + 0.1 * velocity, -1.0, 1.0)
        reward = -float(np.linalg.norm(self._point - self._goal))
        return self._observe(), reward, False, False, {}

    def _observe(self) -> np.ndarray:
        return np.concatenate([self._point, self._goal]).astype(np.float32)


gym.register("Catch-v0", entry_point=Catch, max_episode_steps=BALLS * (SIDE - 1))
gym.register("CatchVector-v0", entry_point=CatchVector, max_episode_steps=BALLS * (SIDE - 1))
gym.register("CueCorridor-v0", entry_point=CueCorridor, max_episode_steps=CORRIDOR)
gym.register("PointReach-v0", entry_point=PointReach, max_episode_steps=REACH_STEPS)
