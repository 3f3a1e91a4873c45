"""n-step transitions from a vector of environments stepping in lock-step.

For env ``e`` and a start step ``t``, with rewards ``r`` and ``γ`` the discount, the
transition is ``(s_t, a_t, R, d, s')`` where, if no episode boundary falls within the
next ``n`` steps:

    R  = Σ_{k=0}^{n-1} γ^k r_{t+k}      d = γ^n      s' = s_{t+n}

and if the episode ends after step ``T`` with ``t <= T < t+n-1`` (``L = T − t + 1`` steps):

    R  = Σ_{k=0}^{L-1} γ^k r_{t+k}      s' = the final observation s_{T+1}
    d  = 0     if the episode *terminated* (no value beyond a terminal state)
    d  = γ^L   if it was *truncated* (a time limit: bootstrap from the final observation)

so the learner's target is always ``R + d · Q_target(s', argmax_a Q(s', a))``. At a boundary
every pending start of that env is flushed at once, so no transition ever spans two
episodes. A step *dropped* (its env failed in it, ``apex.envs.guard``) ends the episode
too, but its pending starts go with it: each of them would hold that step. Envs must
autoreset in gymnasium's SAME_STEP mode: the step that ends an episode reports the final
observation separately and the reset one as the next observation.

The rolling window is kept per env in preallocated arrays. Emitting on a normal step is
vectorised over the envs; only boundary flushes loop, once per finished episode.
"""

from __future__ import annotations

import numpy as np


class NStepBuilder:
    """Turns lock-step vector-env steps into n-step transitions.

    Args:
        env_count: environments stepping together.
        n: steps per transition, >= 1.
        gamma: discount in [0, 1].
        observation_shape: per-env observation shape.
        observation_dtype: observation dtype.
        action_shape, action_dtype: one action's (a discrete index by default; a float
            vector for continuous actions).

    Raises:
        ValueError: ``n < 1`` or ``gamma`` outside [0, 1].
    """

    def __init__(
        self,
        env_count: int,
        n: int,
        gamma: float,
        observation_shape: tuple[int, ...],
        observation_dtype: np.dtype,
        action_shape: tuple[int, ...] = (),
        action_dtype: np.dtype | type = np.int64,
    ) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.n = n
        self.gamma = gamma
        self._env_count = env_count
        self._observations = np.zeros((n, env_count, *observation_shape), dtype=observation_dtype)
        self._actions = np.zeros((n, env_count, *action_shape), dtype=action_dtype)
        self._rewards = np.zeros((n, env_count), dtype=np.float64)
        self._pending = np.zeros(env_count, dtype=np.int64)
        self._step = 0
        self._powers = gamma ** np.arange(n + 1, dtype=np.float64)
        self.discarded = 0  # transitions dropped steps took with them

    def step(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        dropped: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """Records one step of every env and returns the transitions it completes.

        Args:
            observations: ``s_t`` per env (what the actions were chosen from).
            actions: ``a_t`` per env.
            rewards: ``r_t`` per env.
            next_observations: ``s_{t+1}`` per env; for envs whose episode ended at this
                step, the *final* observation (not the reset one).
            terminated: per env, the episode reached a terminal state.
            truncated: per env, the episode was cut (time limit).
            dropped: per env, the step failed: its episode ends and none of its pending
                transitions are made (None: none failed).

        Returns:
            ``{"obs", "action", "reward", "discount", "next_obs"}`` arrays of equal length
            (float32 reward and discount, actions as given), possibly empty.
        """
        slot = self._step % self.n
        self._observations[slot] = observations
        self._actions[slot] = actions
        self._rewards[slot] = rewards
        self._pending += 1
        self._step += 1
        ended = np.logical_or(terminated, truncated)
        flushed = ended
        if dropped is not None:
            ended |= dropped
            flushed = ended & ~dropped
            self.discarded += int(self._pending[dropped].sum())
            self._pending[dropped] = 0
        parts = []
        full = np.flatnonzero((self._pending == self.n) & ~ended)
        if full.size:
            order = (slot + 1 + np.arange(self.n)) % self.n  # oldest first
            returns = (self._rewards[order][:, full] * self._powers[: self.n, None]).sum(axis=0)
            parts.append(
                (
                    self._observations[order[0], full],
                    self._actions[order[0], full],
                    returns,
                    np.full(full.size, self._powers[self.n]),
                    next_observations[full],
                )
            )
            self._pending[full] -= 1
        for env in np.flatnonzero(flushed):
            parts.append(self._flush(env, slot, next_observations[env], bool(terminated[env])))
            self._pending[env] = 0
        return self._concatenate(parts, next_observations)

    def _flush(self, env: int, slot: int, final_observation: np.ndarray, terminal: bool):
        """Every pending start of ``env``, oldest first, ending at this step."""
        count = int(self._pending[env])
        order = (slot - count + 1 + np.arange(count)) % self.n  # oldest first
        rewards = self._rewards[order, env]
        returns = np.empty(count)
        discounts = np.empty(count)
        for start in range(count):
            length = count - start
            returns[start] = (rewards[start:] * self._powers[:length]).sum()
            discounts[start] = 0.0 if terminal else self._powers[length]
        finals = np.broadcast_to(final_observation, (count, *final_observation.shape))
        return (
            self._observations[order, env],
            self._actions[order, env],
            returns,
            discounts,
            finals,
        )

    def _concatenate(self, parts, next_observations: np.ndarray) -> dict[str, np.ndarray]:
        if not parts:
            shape = next_observations.shape[1:]
            return {
                "obs": np.zeros((0, *shape), next_observations.dtype),
                "action": np.zeros((0, *self._actions.shape[2:]), self._actions.dtype),
                "reward": np.zeros(0, np.float32),
                "discount": np.zeros(0, np.float32),
                "next_obs": np.zeros((0, *shape), next_observations.dtype),
            }
        columns = list(zip(*parts, strict=True))
        return {
            "obs": np.concatenate(columns[0]),
            "action": np.concatenate(columns[1]),
            "reward": np.concatenate(columns[2]).astype(np.float32),
            "discount": np.concatenate(columns[3]).astype(np.float32),
            "next_obs": np.concatenate(columns[4]),
        }
