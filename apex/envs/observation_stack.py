"""The newest ``k`` observations side by side, for any env whose observation is a ``Box``
(a run config's ``[env] stack = k``): the memory a feed-forward agent gets, the usual
control beside a recurrent one (a partially observed task's DQN "with frame stacking").

A vector of ``d`` becomes one of ``k·d``; an image of planes keeps its rank, its planes
``k`` times as many (``(h, w, c)`` to ``(h, w, k·c)``, ``(c, h, w)`` to ``(k·c, h, w)``,
the channel axis ``apex.algorithms.network_choice`` reads), and ``(h, w)`` becomes
``(h, w, k)``. Oldest first. At an episode's start every slot holds the first observation
(gymnasium's ``FrameStackObservation`` with ``padding_type="reset"``). ALE games stack
their frames in their own pipeline and take no ``[env] stack``.
"""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np

from apex.envs.image_axes import channels_first


def stack_axis(shape: tuple[int, ...]) -> int:
    """The axis the copies go side by side on: a vector's, an image's channel axis
    (``apex.envs.image_axes``); ``(h, w)`` gains one."""
    if len(shape) == 3 and channels_first(shape):
        return 0
    return len(shape) - 1 if len(shape) != 2 else 2


class ObservationStack(gym.ObservationWrapper):
    """``env``'s newest ``count`` observations, as the module docstring says.

    Raises:
        ValueError: a ``count`` below 1, or an observation space that is not a ``Box`` of
            one to three dimensions.
    """

    def __init__(self, env: gym.Env, count: int) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(count, int) or count < 1:
            raise ValueError(
                f"[env] stack must be a whole number of observations >= 1, got {count!r}"
            )
        if not isinstance(space, gym.spaces.Box) or not 1 <= len(space.shape) <= 3:
            raise ValueError(
                f"[env] stack takes a Box observation of 1 to 3 dimensions; this env's is {space}"
            )
        self._axis = stack_axis(space.shape)
        self._planar = len(space.shape) == 2  # (h, w): each copy gains a plane axis
        low, high = self._joined([space.low] * count), self._joined([space.high] * count)
        self.observation_space = gym.spaces.Box(low, high, dtype=space.dtype)
        self._kept: deque[np.ndarray] = deque(maxlen=count)

    def _joined(self, observations) -> np.ndarray:
        if self._planar:
            return np.stack(observations, axis=2)
        return np.concatenate(observations, axis=self._axis)

    def reset(self, *, seed=None, options=None):
        observation, info = self.env.reset(seed=seed, options=options)
        self._kept.clear()
        self._kept.extend([observation] * self._kept.maxlen)
        return self._joined(self._kept), info

    def observation(self, observation: np.ndarray) -> np.ndarray:
        self._kept.append(observation)
        return self._joined(self._kept)
