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
- ``TwoCues-v0``: two cues (one of two each), on the first step and the fourth, then
  nothing but the time; the last of 12 steps pays +1 for the action (one of four) that
  names both, else -1. Without memory the best mean is -0.5; with it, 1.
- ``GridWalk-v0``: a walk to a corner drawn each episode on a 10x10 grid seen as a
  ``(10, 10, 2)`` image (the agent's plane, the goal's), -0.02 a step and +1 at the goal,
  40 steps at most. Random play scores about -0.6; a shortest walk, about +0.8.
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


class TwoCues(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(4)
    CUE_STEPS = (0, 3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cues, self._t = self.np_random.integers(2, size=2), 0
        return self._observe(), {}

    def step(self, action):
        self._t += 1
        last = self._t == CORRIDOR
        answer = 2 * int(self._cues[0]) + int(self._cues[1])
        reward = (1.0 if int(action) == answer else -1.0) if last else 0.0
        return self._observe(), reward, last, False, {}

    def _observe(self) -> np.ndarray:
        observation = np.array([0.0, 0.0, self._t / CORRIDOR], np.float32)
        for slot, step in enumerate(self.CUE_STEPS):
            if self._t == step:  # a cue of 0 shows as 0.5, of 1 as 1.0
                observation[slot] = 0.5 + 0.5 * self._cues[slot]
        return observation


class GridWalk(gym.Env):
    WALK_SIDE = 10
    observation_space = gym.spaces.Box(0, 1, (WALK_SIDE, WALK_SIDE, 2), np.uint8)
    action_space = gym.spaces.Discrete(4)  # up, down, left, right

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        side = self.WALK_SIDE
        self._cell = self.np_random.integers(side, size=2)
        corners = np.array([[0, 0], [0, side - 1], [side - 1, 0], [side - 1, side - 1]])
        self._goal = corners[self.np_random.integers(4)]
        return self._observe(), {}

    def step(self, action):
        moves = ((-1, 0), (1, 0), (0, -1), (0, 1))
        self._cell = np.clip(self._cell + moves[int(action)], 0, self.WALK_SIDE - 1)
        reached = bool((self._cell == self._goal).all())
        return self._observe(), (1.0 if reached else -0.02), reached, False, {}

    def _observe(self) -> np.ndarray:
        grid = np.zeros((self.WALK_SIDE, self.WALK_SIDE, 2), np.uint8)
        grid[self._cell[0], self._cell[1], 0] = 1
        grid[self._goal[0], self._goal[1], 1] = 1
        return grid


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
gym.register("TwoCues-v0", entry_point=TwoCues, max_episode_steps=CORRIDOR)
gym.register("GridWalk-v0", entry_point=GridWalk, max_episode_steps=40)
gym.register("PointReach-v0", entry_point=PointReach, max_episode_steps=REACH_STEPS)
