"""Overlapping fixed-length sequences from a vector of environments, each with the
recurrent state it started from (R2D2, Kapturowski et al. 2019).

A sequence of env ``e`` holds up to ``m`` consecutive steps of one episode and the
observation after the last:

    obs        s_0 ... s_m          (m + 1 observations; after the last real step, the one
                                     it led to, then that one again as padding)
    action     a_0 ... a_{m-1}
    reward     r_0 ... r_{m-1}
    discount   γ_t = γ, or 0 where the episode terminated at step t (and at padding)
    mask       1 for a real step, 0 for padding past the episode's end
    state      the policy's recurrent state before s_0 (the stored state)
    burn_in_state  its state before s_l, the first step after a burn-in of ``l`` (zeros
               where the sequence is shorter): what the learner's burn-in from the
               stored state is measured against
    starts     1 where s_0 is its episode's first observation: the stored state is then
               the policy's initial one, exact, and needs no burn-in

Sequences never cross an episode's end (R2D2's rule). An env emits one each time it has
taken ``m`` steps since its window began; the next window keeps the last ``m - period``
of them (R2D2's overlap of 40 in 80, ``period`` 40), and its stored state is the one the
policy had before the first step it keeps. Where an episode ends the window is emitted
padded with ``mask`` 0 (it holds at least the step that ended it, in no sequence yet). A
*truncated* episode (a time limit) keeps ``γ`` at its last step and its final
observation as the next one, so a learner bootstraps from its value; a terminated one has
``γ`` 0 there. A *dropped* step (its env failed in it, ``apex.envs.guard``) ends the
episode and its window is not sent: it holds the step. The windows sent before it do not.

With ``references`` (frame shards, ``apex.acting.frame_writer``) each sequence also
carries ``refs``: its env, then the frame numbers of its ``m + 1`` observations, padding
repeating the last as ``obs`` does (a frame shard must find every number it is given; the
mask keeps the learner's loss off padding, whatever it holds).

Steps are written into preallocated per-env windows; only emitted sequences are copied.
"""

from __future__ import annotations

import numpy as np


class SequenceBuilder:
    """Turns vector-env steps into overlapping sequences with stored states.

    Args:
        env_count: environments stepping together.
        length: steps per sequence ``m``, >= 2.
        period: steps between the starts of an env's consecutive sequences, in
            [1, ``m``] (``m // 2``: R2D2's overlap of half a sequence).
        gamma: discount in [0, 1].
        observation_shape, observation_dtype: one observation's.
        state_shape: one env's recurrent state (an LSTM's ``(2, units)``: h and c).
        burn_in: the step whose state goes with each sequence as ``burn_in_state``,
            in [0, ``m``).
        references: also build ``refs`` from the ``(env, frame number)`` pairs that
            :meth:`step` is handed.

    Raises:
        ValueError: a length, period or gamma out of range.
    """

    def __init__(
        self,
        env_count: int,
        length: int,
        period: int,
        gamma: float,
        observation_shape: tuple[int, ...],
        observation_dtype: np.dtype,
        state_shape: tuple[int, ...],
        burn_in: int = 0,
        references: bool = False,
    ) -> None:
        if length < 2:
            raise ValueError(f"sequence length must be >= 2, got {length}")
        if not 1 <= period <= length:
            raise ValueError(f"sequence period must be in [1, {length}], got {period}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if not 0 <= burn_in < length:
            raise ValueError(f"sequence burn-in must be in [0, {length}), got {burn_in}")
        self.length, self.period, self.gamma, self.burn_in = length, period, gamma, burn_in
        self._obs = np.zeros((env_count, length + 1, *observation_shape), observation_dtype)
        self._action = np.zeros((env_count, length), np.int64)
        self._reward = np.zeros((env_count, length), np.float32)
        self._discount = np.zeros((env_count, length), np.float32)
        self._state = np.zeros((env_count, length + 1, *state_shape), np.float32)
        self._refs = np.zeros((env_count, length + 1, 2), np.int64) if references else None
        self._filled = np.zeros(env_count, np.int64)  # steps in each env's window
        self._starts = np.ones(env_count, bool)  # the window starts its episode
        self._rows = np.arange(env_count)
        self.discarded = 0  # windows dropped steps took with them

    @property
    def filled(self) -> np.ndarray:
        """Steps in each env's window so far (a copy)."""
        return self._filled.copy()

    def step(
        self,
        observations: np.ndarray,
        states: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        final_observations: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        refs: tuple[np.ndarray, np.ndarray] | None = None,
        dropped: np.ndarray | None = None,
    ) -> dict[str, np.ndarray] | None:
        """Adds one vector step; returns the sequences it completes (a leading axis of
        them) or None.

        Args:
            observations: what each env's action was taken on.
            states: each env's recurrent state before that action.
            actions, rewards: the step's.
            next_observations: what each env goes on from (the reset observation where
                an episode ended).
            final_observations: the step's own next observations (an ended episode's
                final one).
            terminated, truncated: per env.
            refs: with ``references``, the ``(env, frame number)`` pairs of
                ``observations`` and of ``final_observations``.
            dropped: per env, the step failed (``apex.envs.guard``): its episode ends
                and the env's window, which holds the step, is not sent.
        """
        rows, filled = self._rows, self._filled
        if self._refs is not None:
            self._refs[rows, filled], self._refs[rows, filled + 1] = refs
        self._obs[rows, filled] = observations
        self._state[rows, filled] = states
        self._action[rows, filled] = actions
        self._reward[rows, filled] = rewards
        terminated = np.asarray(terminated, bool)
        ended = terminated | np.asarray(truncated, bool)
        if dropped is not None:
            ended |= dropped
        self._discount[rows, filled] = np.where(terminated, 0.0, self.gamma)
        # What follows each step: the observation its env goes on from, or where the
        # episode ended its final one (written over, only for those envs).
        self._obs[rows, filled + 1] = next_observations
        if ended.any():
            self._obs[rows[ended], filled[ended] + 1] = final_observations[ended]
        filled += 1
        full = filled == self.length
        emit = full | ended
        if dropped is not None:
            emit &= ~dropped
            self.discarded += int(dropped.sum())
        sequences = self._emit(np.flatnonzero(emit)) if emit.any() else None
        # A full window of an episode that goes on keeps its last m - period steps.
        for env in np.flatnonzero(full & ~ended):
            self._shift(env)
        restart = np.flatnonzero(ended)
        filled[restart] = 0
        self._starts[restart] = True
        return sequences

    def _emit(self, envs: np.ndarray) -> dict[str, np.ndarray]:
        reached = (self._filled[envs] > self.burn_in).reshape(-1, *([1] * (self._state.ndim - 2)))
        steps = np.arange(self.length)
        mask = (steps[None, :] < self._filled[envs, None]).astype(np.float32)
        # Past the last observation, that one again: padding, the same on either path.
        kept = np.minimum(np.arange(self.length + 1)[None, :], self._filled[envs, None])
        references = {}
        if self._refs is not None:
            numbers = self._refs[envs[:, None], kept, 1]
            references["refs"] = np.column_stack([self._refs[envs, 0, 0], numbers])
        return {
            **references,
            "obs": self._obs[envs[:, None], kept],
            "action": np.where(mask > 0, self._action[envs], 0),
            "reward": self._reward[envs] * mask,
            "discount": self._discount[envs] * mask,
            "mask": mask,
            "state": self._state[envs, 0].copy(),
            "burn_in_state": np.where(reached, self._state[envs, self.burn_in], 0.0).astype(
                np.float32
            ),
            "starts": self._starts[envs].astype(np.float32),
        }

    def _shift(self, env: int) -> None:
        kept = self.length - self.period
        if kept:
            self._obs[env, : kept + 1] = self._obs[env, self.period :]
            if self._refs is not None:
                self._refs[env, : kept + 1] = self._refs[env, self.period :]
            self._state[env, :kept] = self._state[env, self.period : self.length]
            self._action[env, :kept] = self._action[env, self.period :]
            self._reward[env, :kept] = self._reward[env, self.period :]
            self._discount[env, :kept] = self._discount[env, self.period :]
        self._filled[env] = kept
        self._starts[env] = False
