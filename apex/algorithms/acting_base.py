"""What acting policies and experience builders share: the state half of a feed-forward
policy, a policy that is its network's copy, and an experience builder's acting half
(the policy, its per-env state, and the episodes that start)."""

from __future__ import annotations

from typing import Any

import numpy as np


class FeedForward:
    """The state half of ``ActingPolicy`` for a policy that keeps none between steps."""

    def initial_state(self, envs: int) -> None:
        return None

    def begin_episodes(self, state: None, envs: np.ndarray) -> None:
        """Nothing to reset."""


class NetworkPolicy(FeedForward):
    """A feed-forward policy that is its ``network``'s copy of the learner's weights."""

    network: Any

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.network.parameter_shapes()

    def load(self, arrays) -> None:
        self.network.load(arrays)


class ActingOnEnvs:
    """An experience builder's acting half: ``policy`` acts on ``envs`` envs, each with its
    own state, reset where an episode starts."""

    def __init__(self, policy, envs: int) -> None:
        self._policy = policy
        self._state = policy.initial_state(envs)

    def begin(self, observations: np.ndarray) -> None:
        self._policy.begin_episodes(self._state, np.arange(len(observations)))

    def act(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        return self._policy.explore(observations, scales, rng, self._state)

    def _episodes_end(self, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """The envs whose episode ended go on with a new one."""
        ended = np.flatnonzero(np.logical_or(terminated, truncated))
        if ended.size:
            self._policy.begin_episodes(self._state, ended)
