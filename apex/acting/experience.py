"""What an actor makes of its vector steps: its algorithm's items (n-step transitions,
IMPALA's unrolls; ``apex.algorithms.protocols.ExperienceBuilder``) and, for frame shards,
the frame references that take the observations' place.

With frame shards each observation's newest frame is written once, numbered per env
(``apex.acting.frame_writer``): the maker numbers them, hands the algorithm's builder
the ``(env, frame number)`` pairs of each step, and checks on the first steps that the
observations are stacks of frames at all (``apex.acting.frame_check``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from apex.acting.frame_check import FrameStackCheck
from apex.algorithms.protocols import ExperienceBuilder
from apex.settings import ActorConfig

if TYPE_CHECKING:
    from apex.acting.frame_writer import FrameWriter


def _pairs(numbers: np.ndarray, first_env: int) -> np.ndarray:
    """``(env, frame number)`` per env, the "observation" the reference builder carries
    (envs numbered from ``first_env``: the frame writer's streams are the actor's)."""
    envs = np.arange(first_env, first_env + len(numbers), dtype=np.int64)
    return np.column_stack([envs, numbers])


class ExperienceMaker:
    """One actor's experience from its steps.

    Args:
        config: the actor's settings.
        builder: its algorithm's builder of what it sends (``Acting.experience``), for
            ``config.envs_per_actor`` envs.
        frames: the frame writer, with frame shards.
        first_env: the actor's index of this maker's first env: an actor of env groups
            (``apex.acting.env_group``) has a maker per group, ``config.envs_per_actor``
            envs each, and one frame writer whose streams are all its envs.
    """

    def __init__(
        self,
        config: ActorConfig,
        builder: ExperienceBuilder,
        frames: FrameWriter | None,
        first_env: int = 0,
    ) -> None:
        self._first_env = first_env
        self._builder = builder
        self._frames = frames
        # Frame shards keep each observation's newest frame only: proven stacks first.
        self._stacks = FrameStackCheck(config.env) if frames is not None else None
        self._envs = config.envs_per_actor
        self._numbers = np.full(self._envs, -1, dtype=np.int64)

    def begin(self, observations: np.ndarray) -> None:
        """The envs' first observations (after their reset)."""
        self._numbers = self._number(observations, np.arange(self._envs), episode_start=True)
        self._builder.begin(observations)

    def act(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        """Actions for ``observations`` (each copy exploring at its scale)."""
        return self._builder.act(observations, scales, rng)

    def step(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        final_observations: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        dropped: np.ndarray | None = None,
    ) -> dict[str, np.ndarray] | None:
        """One vector step: what it completes (None or empty arrays: nothing).

        ``next_observations`` are what the envs go on from (reset ones where an episode
        ended); ``final_observations`` the transitions' (an ended episode's final one);
        ``dropped``: the envs whose step failed (``ExperienceBuilder.step``)."""
        ended = np.logical_or(terminated, truncated)
        pairs = None
        if self._stacks is not None and not self._stacks.done:
            self._stacks.step(observations, final_observations, ended)
        if self._frames is not None:
            # An episode's final frame first, then its successor's reset frame.
            final = self._number(final_observations, np.arange(self._envs), episode_start=False)
            pairs = (_pairs(self._numbers, self._first_env), _pairs(final, self._first_env))
            reset = self._number(next_observations, np.flatnonzero(ended), episode_start=True)
            self._numbers = np.where(ended, reset, final)
        return self._builder.step(
            observations,
            actions,
            rewards,
            next_observations,
            final_observations,
            terminated,
            truncated,
            pairs,
            dropped,
        )

    @property
    def discarded(self) -> int:
        """Items that dropped steps took with them (``ExperienceBuilder.discarded``)."""
        return self._builder.discarded

    def priorities(
        self, batch: dict[str, np.ndarray], epsilon: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The batch as it is sent, and its initial priorities ``|TD| + epsilon``."""
        return self._builder.priorities(batch, epsilon)

    def _number(
        self, observations: np.ndarray, envs: np.ndarray, episode_start: bool
    ) -> np.ndarray:
        """Numbers the newest frame of the observations of ``envs`` (a frame writer's
        stream each); returns a number per env (-1 for the others, and for every env
        without frame shards)."""
        numbers = np.full(self._envs, -1, dtype=np.int64)
        if self._frames is not None and len(envs):
            numbers[envs] = self._frames.observe(
                envs + self._first_env, observations[envs, -1], episode_start
            )
        return numbers
