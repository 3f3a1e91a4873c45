"""Proof, on real observations, that an env's observations are stacks of frames.

Frame shards keep only the newest frame of each observation and rebuild the stack from
the frames before it (``replay.frames.storage``). That is right only if the stack an env
gives after a step is the one before it shifted by a frame: ``next[:-1] == obs[1:]``
along the first axis. A 3-D observation that is not a stack (a grid of planes, an image
with channels first) would be kept as its last slice and trained on silently, so frame
storage is chosen by the env family (the ALE pipeline's stacks) or asked for, and then
proven here: by the launcher on one env before any process starts, and by every actor on
its first steps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Vector steps an actor watches before it takes its observations for proven stacks.
STEPS_CHECKED = 8


class NotFrameStacks(ValueError):
    """The observations are not stacks of frames; the message says where they differ."""


class FrameStackCheck:
    """Watches an actor's first :data:`STEPS_CHECKED` vector steps.

    Args:
        env_name: named in the error.
    """

    def __init__(self, env_name: str, steps: int = STEPS_CHECKED) -> None:
        self._env = env_name
        self._steps_left = steps
        self._step = 0

    @property
    def done(self) -> bool:
        return self._steps_left <= 0

    def step(self, observations: np.ndarray, following: np.ndarray, ended: np.ndarray) -> None:
        """One vector step: ``following[i]`` is env ``i``'s observation after
        ``observations[i]`` (its final one where ``ended[i]``).

        Raises:
            NotFrameStacks: a stack that is not the one before it shifted by a frame.
        """
        if self.done:
            return
        self._step += 1
        self._steps_left -= 1
        if observations.ndim < 3 or observations.shape[1] < 2:
            raise NotFrameStacks(
                self._say(f"observations of shape {observations.shape[1:]} have no frames to share")
            )
        envs = len(observations)
        shifted = (following[:, :-1] == observations[:, 1:]).reshape(envs, -1).all(axis=1)
        broken = np.flatnonzero(~shifted & ~np.asarray(ended, dtype=bool))
        if broken.size:
            raise NotFrameStacks(
                self._say(
                    f"env {broken[0]}'s observation after step {self._step} is not the one "
                    "before it shifted by a frame (next[:-1] != obs[1:])"
                )
            )

    def _say(self, what: str) -> str:
        return (
            f"{self._env}: frame storage needs observations that are stacks of frames, "
            f"but {what}; set replay.frames = false to store them whole"
        )


def prove_frame_stacks(make_env: Callable[[], object], env_name: str, seed: int = 0) -> None:
    """Plays :data:`STEPS_CHECKED` random steps of one env and checks its stacks.

    Raises:
        NotFrameStacks: as :meth:`FrameStackCheck.step`.
    """
    env = make_env()
    try:
        observation, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        check = FrameStackCheck(env_name)
        while not check.done:
            following, _, terminated, truncated, _ = env.step(env.action_space.sample())
            ended = np.array([terminated or truncated])
            check.step(np.asarray(observation)[None], np.asarray(following)[None], ended)
            observation = env.reset()[0] if ended[0] else following
    finally:
        env.close()
