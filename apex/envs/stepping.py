"""How an actor's (or the evaluator's) env copies step: one after another on the caller's
thread, on threads of their own, or in processes of their own.

A vector env of k copies steps them one after another by default (gymnasium's
``SyncVectorEnv``): right for an env whose step is microseconds of numpy, since any
hand-off costs more than the step. An env whose step is slow changes that:

- ``"threads"``: each copy steps on a thread of its own (:class:`ThreadedVectorEnv`), so k
  copies take about one step's time. For envs whose step waits rather than computes: a
  simulator on another core or host, a service, I/O, or a C extension that lets go of
  Python's lock. Costs a thread per copy and no process.
- ``"processes"``: each copy in a process of its own with its observations in shared memory
  (gymnasium's ``AsyncVectorEnv``, started from a fork server), so copies that compute in
  Python use as many cores as there are copies, where the machine has them. Costs a
  process per copy and its start (an import of the env's module); commands, actions and
  infos cross a pipe to the actor's own children, never a socket.

Every mode gives the same observations, rewards and episode ends for the same seeds and
actions (``tests/test_env_stepping.py``): only who waits changes. ALE games ignore the
setting: their emulators already play on threads of their own (``actor.env_threads``).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, iterate

EnvStepping = Literal["serial", "threads", "processes"]
ENV_STEPPINGS: tuple[str, ...] = EnvStepping.__args__
# The fork server imports these once; each copy's process forks from it with them loaded
# (about 0.4 s of a core per copy otherwise).
FORKSERVER_PRELOAD = ["numpy", "gymnasium", "apex.envs.families"]


def vector_env(
    factories: Sequence[Callable[[], gym.Env]],
    stepping: EnvStepping = "serial",
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
) -> gym.vector.VectorEnv:
    """The copies ``factories`` make, as one vector env that steps them as ``stepping`` says.

    Raises:
        ValueError: an unknown ``stepping``.
    """
    if stepping == "serial":
        return gym.vector.SyncVectorEnv(factories, autoreset_mode=autoreset_mode)
    if stepping == "threads":
        return ThreadedVectorEnv(factories, autoreset_mode=autoreset_mode)
    if stepping == "processes":
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
        return gym.vector.AsyncVectorEnv(
            factories, shared_memory=True, context="forkserver", autoreset_mode=autoreset_mode
        )
    raise ValueError(f"env stepping must be one of {ENV_STEPPINGS}, got {stepping!r}")


class ThreadedVectorEnv(gym.vector.SyncVectorEnv):
    """A ``SyncVectorEnv`` whose copies step (and reset) at once, each on a thread of its
    own; results are gathered in the copies' order, so observations, rewards, episode ends
    and infos are exactly a ``SyncVectorEnv``'s.

    Args:
        factories: one per copy.
        autoreset_mode: as gymnasium's (``NEXT_STEP``, ``SAME_STEP`` or ``DISABLED``).
    """

    def __init__(
        self,
        factories: Sequence[Callable[[], gym.Env]],
        autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    ) -> None:
        super().__init__(factories, autoreset_mode=autoreset_mode)
        self._pool = ThreadPoolExecutor(max_workers=self.num_envs, thread_name_prefix="env-copy")

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        if options is not None and "reset_mask" in options:
            return super().reset(seed=seed, options=options)  # a few copies: one by one
        if seed is None:
            seed = [None] * self.num_envs
        elif isinstance(seed, int):
            seed = [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ValueError(f"{len(seed)} seeds for {self.num_envs} copies")
        results = list(
            self._pool.map(lambda env, s: env.reset(seed=s, options=options), self.envs, seed)
        )
        self._terminations = np.zeros(self.num_envs, dtype=np.bool_)
        self._truncations = np.zeros(self.num_envs, dtype=np.bool_)
        self._autoreset_envs = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict = {}
        for i, (observation, info) in enumerate(results):
            self._env_obs[i] = observation
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        return deepcopy(self._observations) if self.copy else self._observations, infos

    def _step_copy(self, i: int, action) -> tuple:
        """Copy ``i``'s step under the autoreset mode: ``(observation, reward,
        terminated, truncated, info, final)``, ``final`` the ended episode's last
        observation and info where ``SAME_STEP`` reset it in this step (else None)."""
        env = self.envs[i]
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
            observation, info = env.reset()
            return observation, 0.0, False, False, info, None
        observation, reward, terminated, truncated, info = env.step(action)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and (terminated or truncated):
            final = {"final_obs": observation, "final_info": info}
            observation, info = env.reset()
            return observation, reward, terminated, truncated, info, final
        return observation, reward, terminated, truncated, info, None

    def step(self, actions):
        actions = list(iterate(self.action_space, actions))
        results = list(self._pool.map(self._step_copy, range(self.num_envs), actions))
        infos: dict = {}
        for i, (observation, reward, terminated, truncated, info, final) in enumerate(results):
            self._env_obs[i] = observation
            self._rewards[i] = reward
            self._terminations[i] = terminated
            self._truncations[i] = truncated
            if final is not None:
                infos = self._add_info(infos, final, i)
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        observations = deepcopy(self._observations) if self.copy else self._observations
        return (
            observations,
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

    def close_extras(self, **kwargs: Any) -> None:
        self._pool.shutdown(wait=True)
        super().close_extras(**kwargs)
