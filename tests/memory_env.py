"""A task that needs memory, registered for gymnasium's ``module:Id`` form:
``tests.memory_env:Cue-v0``. The first observation shows a cue (one of two); the next
ones only the time; at the last step the action that names the cue pays +1, the other
-1. Without memory the best expected return is 0; with it, 1."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

STEPS = 4


class Cue(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue, self._t = int(self.np_random.integers(2)), 0
        return self._observe(), {}

    def step(self, action):
        self._t += 1
        last = self._t == STEPS
        reward = (1.0 if int(action) == self._cue else -1.0) if last else 0.0
        return self._observe(), reward, last, False, {}

    def _observe(self) -> np.ndarray:
        observation = np.array([0.0, 0.0, self._t / STEPS], np.float32)
        if self._t == 0:
            observation[self._cue] = 1.0
        return observation


gym.register("Cue-v0", entry_point=Cue)
