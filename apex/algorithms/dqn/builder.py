"""Ape-X DQN (Horgan et al. 2018): double DQN with dueling heads on n-step transitions from
prioritized replay, actors exploring ε-greedily with ε spread over their env copies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apex.algorithms.defaults_file import load_defaults
from apex.algorithms.dqn.acting import DQNActing
from apex.algorithms.dqn.learner import DoubleDQN
from apex.algorithms.dqn.settings import DQNSettings
from apex.algorithms.network_choice import builtin_network_problems
from apex.algorithms.nstep_experience import ValuedNStepExperience
from apex.algorithms.policy import network_or_builtin

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig, LearnerConfig
    from replay.store.spec import TransitionSpec


class DQNBuilder:
    """``apex.algorithms.protocols.AlgorithmBuilder`` of Ape-X DQN."""

    name = "dqn"
    continuous = False
    replay = "prioritized"
    exploration_symbol = "ε"
    items = "transitions"
    defaults = load_defaults(__file__)
    run_defaults = defaults.run
    settings_type = DQNSettings

    def shape_problems(self, shape: EnvShape, env: str) -> list[str]:
        """DQN takes any observations its networks do (vectors, images, stacked frames)."""
        return []

    def network_problems(self, config: LearnerConfig, shape: EnvShape) -> list[str]:
        if not config.network:
            return builtin_network_problems(shape.observation_shape, config.env)
        from apex.algorithms.networks import user_network_problems  # torch: a user's only

        return user_network_problems(config.network, shape, "q")

    def exploration_scale(self, settings: DQNSettings) -> float:
        return settings.epsilon

    def transition_spec(
        self, shape: EnvShape, actor: ActorConfig, settings: DQNSettings
    ) -> TransitionSpec:
        return shape.transition_spec()

    def build_learner(
        self, config: LearnerConfig, settings: DQNSettings, shape: EnvShape, device: torch.device
    ) -> DoubleDQN:
        from apex.algorithms.networks import build_network  # torch: the learner's process

        def builtin():
            return build_network(
                shape.observation_shape, shape.actions, config.hidden, shape.observation_high
            )

        network = network_or_builtin(config.network, shape, builtin)
        return DoubleDQN(config, settings, shape.observation_shape, shape.actions, device, network)

    def build_acting(self, actor: ActorConfig, settings: DQNSettings, shape: EnvShape) -> DQNActing:
        return DQNActing(actor, shape)

    def build_experience(
        self,
        actor: ActorConfig,
        settings: DQNSettings,
        shape: EnvShape,
        policy: DQNActing,
        version: Callable[[], int],
        frame_refs: bool,
    ) -> ValuedNStepExperience:
        return ValuedNStepExperience(actor, shape, policy, version, frame_refs)
