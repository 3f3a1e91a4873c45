"""What an actor makes of its vector steps: n-step transitions (or its algorithm's own
items, IMPALA's unrolls), frame references for frame shards, and initial priorities.

A DQN actor's priorities ``|R + d · max Q(s') − Q(s, a)|`` need ``Q(s)`` and ``Q(s')`` of
each transition. It computed both at sending time, two forward passes per transition on
top of the one per step it acted with, while ``Q(s_t)`` is exactly what it acted with and
``Q(s_{t+n})`` what it acts with n steps later. The maker keeps each step's Q-values and
runs them through an n-step builder in lock-step with the transitions' own (the extra
forward passes are those of episodes' final observations, one an episode), so one
forward pass a step serves both. The values come from the weights of the step they were
computed at, at most one weight refresh older than sending-time ones: a priority is an
estimate either way. With frame shards the observations' own builder is not needed
(records carry frame references), so the stacks are not copied at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from apex.acting.frame_check import FrameStackCheck
from apex.algorithms.nstep import NStepBuilder
from apex.algorithms.registry import ActingPolicy, AlgorithmEntry
from apex.envs.families import EnvShape
from apex.settings import ActorConfig
from replay.store.spec import TransitionSpec

if TYPE_CHECKING:
    from apex.acting.frame_writer import FrameWriter

# What a batch carries for its priorities only, never sent.
VALUE_FIELDS = ("values", "next_values")


def _pairs(numbers: np.ndarray, first_env: int) -> np.ndarray:
    """``(env, frame number)`` per env, the "observation" the reference builder carries
    (envs numbered from ``first_env``: the frame writer's streams are the actor's)."""
    envs = np.arange(first_env, first_env + len(numbers), dtype=np.int64)
    return np.column_stack([envs, numbers])


class ExperienceMaker:
    """One actor's experience from its steps.

    Args:
        config: the actor's settings.
        shape: its env's.
        spec: what it sends (the algorithm's transition spec).
        acting: the policy it acts with, and its algorithm.
        frames: the frame writer, with frame shards.
        version: the policy version the actor acts with now.
        first_env: the actor's index of this maker's first env: an actor of env groups
            (``apex.acting.env_group``) has a maker per group, ``config.envs_per_actor`` envs
            each, and one frame writer whose streams are all its envs.
    """

    def __init__(
        self,
        config: ActorConfig,
        shape: EnvShape,
        spec: TransitionSpec,
        acting: tuple[ActingPolicy, AlgorithmEntry],
        frames: FrameWriter | None,
        version: Callable[[], int],
        first_env: int = 0,
    ) -> None:
        self._first_env = first_env
        self._policy, algorithm = acting
        self._frames = frames
        # Frame shards keep each observation's newest frame only: proven stacks first.
        self._stacks = FrameStackCheck(config.env) if frames is not None else None
        self._envs = config.envs_per_actor
        own_builder = getattr(algorithm.load(), "build_experience", None)
        # The acting values serve the priorities where the policy can take them back.
        self._reuse = own_builder is None and hasattr(self._policy, "td_errors_from")
        self._version = version
        self._values: np.ndarray | None = None  # Q(s, ·) of the observations acted on next
        self._values_version = -1
        self._value_builder: NStepBuilder | None = None
        self._refs: NStepBuilder | None = None
        self._builder = None
        action = spec["action"]
        self._own = own_builder is not None
        if self._own:  # IMPALA's unrolls (of frame references, with frame shards)
            self._builder = own_builder(config, shape, self._policy, version,
                                        frame_refs=frames is not None)  # fmt: skip
        elif frames is None or not self._reuse:
            self._builder = NStepBuilder(
                self._envs, config.n_step, config.gamma, shape.observation_shape,
                shape.observation_dtype, tuple(action.shape), np.dtype(action.dtype),
            )  # fmt: skip
        if self._reuse:
            self._value_builder = NStepBuilder(
                self._envs, config.n_step, config.gamma, (shape.actions,), np.dtype(np.float32),
                tuple(action.shape), np.dtype(action.dtype),
            )  # fmt: skip
        if frames is not None and not self._own:
            # (env, frame number) pairs through a builder in lock-step give the records'
            # frame references (see apex.acting.frame_writer).
            self._refs = NStepBuilder(self._envs, config.n_step, config.gamma, (2,),
                                      np.dtype(np.int64), tuple(action.shape),
                                      np.dtype(action.dtype))  # fmt: skip
        self._numbers = np.full(self._envs, -1, dtype=np.int64)

    def begin(self, observations: np.ndarray) -> None:
        """The envs' first observations (after their reset)."""
        self._numbers = self._number(observations, np.arange(self._envs), episode_start=True)

    def act(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        """Actions for ``observations`` (each copy exploring at its scale)."""
        if not self._reuse:
            return self._policy.explore(observations, scales, rng)
        if self._values is None or self._values_version != self._version():
            # New weights since the values were computed: act on the newest.
            self._values = self._policy.values(observations)
            self._values_version = self._version()
        return self._policy.explore_from(self._values, scales, rng)

    def step(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        final_observations: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> dict[str, np.ndarray] | None:
        """One vector step: what it completes (None or empty arrays: nothing).

        ``next_observations`` are what the envs go on from (reset ones where an episode
        ended); ``final_observations`` the transitions' (an ended episode's final one)."""
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
        out = None
        if self._own:
            out = self._builder.step(observations, actions, rewards, final_observations,
                                     terminated, truncated, refs=pairs)  # fmt: skip
        elif self._builder is not None:
            out = self._builder.step(observations, actions, rewards, final_observations,
                                     terminated, truncated)  # fmt: skip
        if self._refs is not None:
            refs = self._refs.step(pairs[0], actions, rewards, pairs[1], terminated, truncated)
            if out is None:
                out = {name: refs[name] for name in ("action", "reward", "discount")}
            out["refs"] = np.column_stack([refs["obs"], refs["next_obs"][:, 1]])
        if self._reuse:
            next_values = self._policy.values(next_observations)
            final_values = next_values
            if ended.any():
                final_values = next_values.copy()
                final_values[ended] = self._policy.values(final_observations[ended])
            values = self._value_builder.step(self._values, actions, rewards, final_values,
                                              terminated, truncated)  # fmt: skip
            out["values"], out["next_values"] = values["obs"], values["next_obs"]
            self._values, self._values_version = next_values, self._version()
        return out

    def priorities(
        self, batch: dict[str, np.ndarray], epsilon: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The batch as it is sent, and its initial priorities ``|TD| + epsilon``."""
        if self._reuse:
            errors = self._policy.td_errors_from(batch["values"], batch["next_values"], batch)
            batch = {name: array for name, array in batch.items() if name not in VALUE_FIELDS}
        else:
            errors = self._policy.td_errors(batch)
        return batch, errors + epsilon

    def _number(
        self, observations: np.ndarray, envs: np.ndarray, episode_start: bool
    ) -> np.ndarray:
        """Numbers the newest frame of the observations of ``envs`` (a frame writer's
        stream each); returns a number per env (-1 for the others, and for every env
        without frame shards)."""
        numbers = np.full(self._envs, -1, dtype=np.int64)
        if self._frames is not None and len(envs):
            numbers[envs] = self._frames.observe(envs + self._first_env, observations[envs, -1],
                                                 episode_start)  # fmt: skip
        return numbers
