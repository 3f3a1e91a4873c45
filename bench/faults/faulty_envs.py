"""CartPole as a user's simulator that misbehaves, registered for gymnasium's ``module:Id``
form (``bench.faults.faulty_envs:RaisingCartPole-v0``), for the soak (``bench.faults.
soak_suite``) and the tests:

- ``RaisingCartPole-v0``: a step raises ``RuntimeError`` with probability ``rate``;
- ``NanCartPole-v0``: a step's observation is NaN with probability ``rate``;
- ``HangingCartPole-v0``: once the copies of a process have taken ``after`` steps in all
  (copies made again after a fault count on), the next step while the file ``marker``
  does not exist makes it and then never returns (once per run: a restarted actor's
  copies find the marker);
- ``ChaoticCartPole-v0``: all three, at ``raise_rate``, ``nan_rate`` and once.

Faults are drawn from a generator of their own, unseeded, as a simulator's would be.
"""

from __future__ import annotations

import os
import threading

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv


class Raising(gym.Wrapper):
    def __init__(self, rate: float = 0.01, env: gym.Env | None = None) -> None:
        super().__init__(env or CartPoleEnv())
        self._rate, self._faults = rate, np.random.default_rng()

    def step(self, action):
        if self._faults.random() < self._rate:
            raise RuntimeError("the simulator lost its contact solver\nsolver state: diverged")
        return self.env.step(action)


class Nan(gym.Wrapper):
    def __init__(self, rate: float = 0.001, env: gym.Env | None = None) -> None:
        super().__init__(env or CartPoleEnv())
        self._rate, self._faults = rate, np.random.default_rng()

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self._faults.random() < self._rate:
            observation = np.full_like(observation, np.nan)
        return observation, reward, terminated, truncated, info


class Hanging(gym.Wrapper):
    steps_in_process = 0  # every copy's, so a copy made again after a fault counts on

    def __init__(self, marker: str, after: int = 300, env: gym.Env | None = None) -> None:
        super().__init__(env or CartPoleEnv())
        self._marker, self._after = marker, after

    def step(self, action):
        Hanging.steps_in_process += 1
        if Hanging.steps_in_process >= self._after and not os.path.exists(self._marker):
            try:
                with open(self._marker, "x"):
                    pass
            except FileExistsError:
                return self.env.step(action)
            threading.Event().wait()  # never returns
        return self.env.step(action)


def chaotic(raise_rate: float, nan_rate: float, marker: str, after: int = 300) -> gym.Env:
    return Raising(raise_rate, Nan(nan_rate, Hanging(marker, after)))


for name, entry in (
    ("RaisingCartPole-v0", Raising),
    ("NanCartPole-v0", Nan),
    ("HangingCartPole-v0", Hanging),
    ("ChaoticCartPole-v0", chaotic),
):
    gym.register(name, entry_point=entry, max_episode_steps=500, reward_threshold=475.0)
