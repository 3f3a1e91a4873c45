"""Fixed-length unrolls from a vector of environments stepping in lock-step (IMPALA).

An unroll of env ``e`` holds ``T`` consecutive steps and the observation after the last:

    obs        s_0 ... s_T          (T + 1 observations; s_T is the bootstrap observation)
    action     a_0 ... a_{T-1}
    reward     r_0 ... r_{T-1}
    discount   γ_0 ... γ_{T-1}      γ_t = γ, or 0 where the episode ended after step t
    log_prob   log μ(a_t | s_t)     the behaviour policy's, for V-trace's importance weights
    version    the policy version the unroll's first step was taken with (its policy lag,
               when the learner trains on it, is measured from there)

Unrolls run across episode boundaries, as IMPALA's do: where an episode ends after step
``t``, ``γ_t = 0`` cuts every sum at it and ``s_{t+1}`` is the next episode's reset
observation (gymnasium's SAME_STEP autoreset). A *terminated* episode has no value beyond
its end. A *truncated* one (a time limit) does: its step's reward becomes
``r_t + γ · V(final observation)`` with ``V`` the actor's own estimate, the time-limit
bootstrap that PPO implementations use, since the unroll's next observation is already
the reset one.

An unroll holding a *dropped* step (its env failed in it, ``apex.envs.guard``) is not
sent: that env's row is left out of the unrolls the step's round emits.

Consecutive unrolls of an env overlap by one observation: the bootstrap observation of one
is the first of the next, unless an episode ended at the unroll's last step (the actor
hands its final observation as the bootstrap one; its γ of 0 leaves it unread). Every
env emits at the same step, so a call either returns
nothing or one unroll per env (but the dropped), copied out of preallocated buffers.
"""

from __future__ import annotations

import numpy as np


class UnrollBuilder:
    """Turns lock-step vector-env steps into unrolls of ``length`` steps.

    Args:
        env_count: environments stepping together.
        length: steps per unroll ``T``, >= 1.
        gamma: discount in [0, 1].
        observation_shape, observation_dtype: one observation's.
        action_shape, action_dtype: one action's (a discrete index by default).

    Raises:
        ValueError: ``length < 1`` or ``gamma`` outside [0, 1].
    """

    def __init__(
        self,
        env_count: int,
        length: int,
        gamma: float,
        observation_shape: tuple[int, ...],
        observation_dtype: np.dtype,
        action_shape: tuple[int, ...] = (),
        action_dtype: np.dtype | type = np.int64,
    ) -> None:
        if length < 1:
            raise ValueError(f"unroll length must be >= 1, got {length}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.length = length
        self.gamma = gamma
        self._obs = np.zeros((env_count, length + 1, *observation_shape), observation_dtype)
        self._action = np.zeros((env_count, length, *action_shape), action_dtype)
        self._reward = np.zeros((env_count, length), np.float32)
        self._discount = np.zeros((env_count, length), np.float32)
        self._log_prob = np.zeros((env_count, length), np.float32)
        self._version = np.zeros(env_count, np.int64)
        self._dropped = np.zeros(env_count, bool)  # the unroll in progress holds a failed step
        self._position = 0
        self.discarded = 0  # unrolls left out

    @property
    def position(self) -> int:
        """Steps of the unrolls in progress (0 right after they were emitted)."""
        return self._position

    def step(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        log_probs: np.ndarray,
        final_values: np.ndarray | None = None,
        version: int = -1,
        dropped: np.ndarray | None = None,
    ) -> dict[str, np.ndarray] | None:
        """Adds one vector step; returns the finished unrolls (one per env, but those
        holding a dropped step) or None.

        Args:
            observations: what each env's action was taken on.
            actions, rewards: the step's.
            next_observations: what follows each step; read only at an unroll's end as
                its bootstrap observation. Where an episode ended there, either its final
                or the reset observation will do: its γ of 0 leaves it unread by the sums.
            terminated, truncated: per env.
            log_probs: ``log μ(a_t | s_t)`` per env.
            final_values: the actor's ``V`` of each env's final observation; read only
                where ``truncated`` and not ``terminated`` (may be None when no env was).
            version: the policy version the actions were taken with.
            dropped: per env, the step failed (marked truncated too): the env's unroll
                in progress is not sent.
        """
        p = self._position
        if p == 0:
            self._version[:] = version
        if dropped is not None:
            self._dropped |= dropped
        self._obs[:, p] = observations
        self._action[:, p] = actions
        ended = np.logical_or(terminated, truncated)
        reward = np.asarray(rewards, dtype=np.float64)
        # An episode that ends at its time limit in a terminal state (CartPole's pole
        # falling on step 500) is terminated: it has no value to bootstrap from.
        cut = np.logical_and(truncated, np.logical_not(terminated))
        if dropped is not None:
            cut &= ~dropped  # its unroll is not sent: nothing to bootstrap
        if np.any(cut):
            if final_values is None:
                raise ValueError("an episode was truncated: its final value is needed")
            reward = np.where(cut, reward + self.gamma * np.asarray(final_values), reward)
        self._reward[:, p] = reward
        self._discount[:, p] = np.where(ended, 0.0, self.gamma)
        self._log_prob[:, p] = log_probs
        self._position = p + 1
        if self._position < self.length:
            return None
        self._obs[:, self.length] = next_observations
        self._position = 0
        kept = np.flatnonzero(~self._dropped)
        self.discarded += len(self._dropped) - kept.size
        self._dropped[:] = False
        if not kept.size:
            return None
        return {
            "obs": self._obs[kept],
            "action": self._action[kept],
            "reward": self._reward[kept],
            "discount": self._discount[kept],
            "log_prob": self._log_prob[kept],
            "version": self._version[kept],
        }
