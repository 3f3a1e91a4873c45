"""Ape-X DPG: deterministic policy gradients (DDPG, or TD3's fixes) on n-step transitions
from prioritized replay, actors exploring with Gaussian noise spread over their env copies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apex.algorithms.defaults_file import load_defaults
from apex.algorithms.dpg.acting import DPGActing
from apex.algorithms.dpg.learner import DPG
from apex.algorithms.dpg.settings import DPGSettings
from apex.algorithms.nstep_experience import NStepExperience

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig, LearnerConfig
    from replay.store.spec import TransitionSpec


class DPGBuilder:
    """``apex.algorithms.protocols.AlgorithmBuilder`` of Ape-X DPG."""

    name = "dpg"
    continuous = True
    replay = "prioritized"
    exploration_symbol = "σ"
    items = "transitions"
    defaults = load_defaults(__file__)
    run_defaults = defaults.run
    settings_type = DPGSettings

    def shape_problems(self, shape: EnvShape, env: str) -> list[str]:
        if len(shape.observation_shape) != 1:
            return [
                f"{env} has observations of shape {shape.observation_shape}: DPG takes "
                "vector observations (d,)"
            ]
        return []

    def network_problems(self, config: LearnerConfig, shape: EnvShape) -> list[str]:
        if not config.network:
            return []
        return [
            f"learner.network {config.network!r}: a user's network is for DQN and "
            "IMPALA; DPG builds its own policy and critics"
        ]

    def exploration_scale(self, settings: DPGSettings) -> float:
        return settings.noise_scale

    def transition_spec(
        self, shape: EnvShape, actor: ActorConfig, settings: DPGSettings
    ) -> TransitionSpec:
        return shape.transition_spec()

    def build_learner(
        self, config: LearnerConfig, settings: DPGSettings, shape: EnvShape, device: torch.device
    ) -> DPG:
        return DPG(
            config,
            settings,
            shape.observation_shape[0],
            shape.action_low,
            shape.action_high,
            device,
        )

    def build_acting(self, actor: ActorConfig, settings: DPGSettings, shape: EnvShape) -> DPGActing:
        return DPGActing(actor, shape)

    def build_experience(
        self,
        actor: ActorConfig,
        settings: DPGSettings,
        shape: EnvShape,
        policy: DPGActing,
        version: Callable[[], int],
        frame_refs: bool,
    ) -> NStepExperience:
        return NStepExperience(actor, shape, policy, frame_refs)
