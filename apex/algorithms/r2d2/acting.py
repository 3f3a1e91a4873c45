"""An actor's R2D2: its copy of the recurrent Q-network, ε-greedy per env copy as in
Ape-X, each copy's LSTM state carried from step to step and zeroed where its episode
starts; and what it sends: overlapping sequences with their stored states
(``apex.algorithms.r2d2.sequences``), each with an initial priority from its own TD errors,
computed as the learner does (``apex.algorithms.r2d2.learning.batch_td``, with the actor's
one network for both of the learner's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from apex.algorithms.acting_base import ActingOnEnvs
from apex.algorithms.exploration import epsilon_greedy
from apex.algorithms.policy import TorchPolicy
from apex.algorithms.r2d2.sequences import SequenceBuilder
from apex.algorithms.r2d2.settings import R2D2Settings

if TYPE_CHECKING:
    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig


class R2D2Acting:
    """The recurrent Q-network in torch; its state, per env copy, is ``[envs, 2, units]``
    (``h`` and ``c``), which the caller holds."""

    def __init__(self, config: ActorConfig, shape: EnvShape, settings: R2D2Settings) -> None:
        from apex.algorithms.r2d2.network import RecurrentQNetwork  # torch

        def build() -> RecurrentQNetwork:
            return RecurrentQNetwork(
                shape.observation_shape,
                shape.actions,
                config.hidden,
                settings.lstm_units,
                shape.observation_high,
            )

        self.network = TorchPolicy(build, config.actor_seed, config.torch_threads)
        self.units = settings.lstm_units
        self._actions = shape.actions

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.network.parameter_shapes()

    def load(self, arrays) -> None:
        self.network.load(arrays)

    def initial_state(self, envs: int) -> np.ndarray:
        return np.zeros((envs, 2, self.units), np.float32)

    def begin_episodes(self, state: np.ndarray, envs: np.ndarray) -> None:
        state[envs] = 0.0

    def values(self, observations: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Q(s, ·) per env for one step; ``state`` moves on, in place."""
        import torch

        from apex.algorithms.r2d2.network import pack, unpack

        with torch.no_grad():
            q, after = self.network.network(
                torch.from_numpy(observations).unsqueeze(1), unpack(torch.from_numpy(state))
            )
        state[:] = pack(after).numpy()
        return q[:, 0].numpy()

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state) -> np.ndarray:
        greedy = self.values(observations, state).argmax(axis=1)
        return epsilon_greedy(greedy, scales, self._actions, rng)


class SequenceExperience(ActingOnEnvs):
    """R2D2's sequences of an actor's envs, with their initial priorities.

    Args:
        config: the actor's settings (``envs_per_actor``, ``gamma``).
        settings: the run's ``[r2d2]`` (sequence length and period, burn-in, n, η).
        shape: its env's.
        policy: what it acts with.
        frame_refs: with frame shards: each sequence is sent as ``refs`` to its frames
            (``apex.algorithms.r2d2.sequences``), its observations kept here only for
            its priority.
    """

    def __init__(
        self,
        config: ActorConfig,
        settings: R2D2Settings,
        shape: EnvShape,
        policy: R2D2Acting,
        frame_refs: bool = False,
    ) -> None:
        super().__init__(policy, config.envs_per_actor)
        self._settings = settings
        self._frame_refs = frame_refs
        self._sequences = SequenceBuilder(
            config.envs_per_actor,
            settings.sequence_length,
            settings.sequence_period,
            config.gamma,
            shape.observation_shape,
            shape.observation_dtype,
            (2, settings.lstm_units),
            settings.burn_in,
            references=frame_refs,
        )
        self._before = self._state.copy()  # each env's state before its latest action

    def act(self, observations: np.ndarray, scales: np.ndarray, rng) -> np.ndarray:
        self._before[:] = self._state
        return super().act(observations, scales, rng)

    @property
    def discarded(self) -> int:
        """Sequences that dropped steps took with them."""
        return self._sequences.discarded

    def step(
        self,
        observations,
        actions,
        rewards,
        next_observations,
        final_observations,
        terminated,
        truncated,
        refs=None,
        dropped=None,
    ):
        out = self._sequences.step(
            observations,
            self._before,
            actions,
            rewards,
            next_observations,
            final_observations,
            terminated,
            truncated,
            refs,
            dropped,
        )
        self._episodes_end(terminated, truncated)
        return out

    def priorities(
        self, batch: dict[str, np.ndarray], epsilon: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        import torch

        from apex.algorithms.r2d2.learning import batch_td
        from apex.algorithms.r2d2.targets import sequence_priorities

        network = self._policy.network.network
        tensors = {name: torch.from_numpy(array) for name, array in batch.items()}
        with torch.no_grad():
            found = batch_td(network, network, tensors, self._settings)
        priorities = sequence_priorities(found.delta.abs(), found.mask, self._settings.eta)
        if self._frame_refs:  # the observations went as frames; the records name them
            batch = {name: array for name, array in batch.items() if name != "obs"}
        return batch, priorities.double().numpy() + epsilon
