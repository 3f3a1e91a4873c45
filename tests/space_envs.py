"""Users' envs with observation spaces of other kinds, registered for gymnasium's
``module:Id`` form: ``tests.space_envs:DictLight-v0`` (a Dict of a Box, a Discrete and a
MultiBinary), ``tests.space_envs:Words-v0`` (Text, which no network takes) and
``tests.space_envs:Pixels-v0`` (a 12x12 uint8 image) and ``tests.space_envs:Specks-v0``
(a 3x3 one, which only a network of the user's own takes)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class DictLight(gym.Env):
    """Press the action the light names: +1, else -1; ten steps an episode."""

    observation_space = gym.spaces.Dict(
        {
            "level": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "light": gym.spaces.Discrete(3),
            "switches": gym.spaces.MultiBinary(4),
        }
    )
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return self._observe(), {}

    def step(self, action):
        reward = 1.0 if int(action) == self._light else -1.0
        self._steps += 1
        return self._observe(), reward, False, self._steps >= 10, {}

    def _observe(self) -> dict:
        self._light = int(self.np_random.integers(3))
        return {
            "level": np.zeros(2, np.float32),
            "light": self._light,
            "switches": np.eye(4, dtype=np.int8)[self._light],
        }


class Words(DictLight):
    observation_space = gym.spaces.Text(8)

    def _observe(self) -> str:
        self._light = 0
        return "light"


class Pixels(DictLight):
    """The light as a lit column of a 12x12 grayscale image."""

    observation_space = gym.spaces.Box(0, 255, (12, 12), np.uint8)

    def _observe(self) -> np.ndarray:
        self._light = int(self.np_random.integers(3))
        image = np.zeros((12, 12), np.uint8)
        image[:, 4 * self._light] = 255
        return image


class Specks(DictLight):
    """The light as a lit column of a 3x3 image: smaller than any built-in convolution."""

    observation_space = gym.spaces.Box(0, 255, (3, 3), np.uint8)

    def _observe(self) -> np.ndarray:
        self._light = int(self.np_random.integers(3))
        image = np.zeros((3, 3), np.uint8)
        image[:, self._light] = 255
        return image


gym.register("DictLight-v0", entry_point=DictLight)
gym.register("Specks-v0", entry_point=Specks)
gym.register("Pixels-v0", entry_point=Pixels)
gym.register("Words-v0", entry_point=Words)
