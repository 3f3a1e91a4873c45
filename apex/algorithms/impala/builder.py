"""IMPALA (Espeholt et al. 2018): an actor-critic learning with V-trace from unrolls that
queues hand out once each, oldest first; its actors sample from their copy of π."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apex.algorithms.defaults_file import load_defaults
from apex.algorithms.impala.acting import ImpalaActing, UnrollMaker
from apex.algorithms.impala.learner import Impala
from apex.algorithms.impala.settings import ImpalaSettings
from apex.algorithms.network_choice import builtin_network_problems
from apex.algorithms.policy import network_or_builtin
from replay.store.spec import TransitionSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig, LearnerConfig


class ImpalaBuilder:
    """``apex.algorithms.protocols.AlgorithmBuilder`` of IMPALA."""

    name = "impala"
    continuous = False
    replay = "queue"
    exploration_symbol = "π"
    items = "unrolls"
    settings_type = ImpalaSettings
    # What every IMPALA run starts from, under the env's preset: queues of unrolls.
    defaults = load_defaults(__file__)
    run_defaults = defaults.run

    def shape_problems(self, shape: EnvShape, env: str) -> list[str]:
        """IMPALA takes the observations its networks do; actions are Discrete (the
        registry checks that)."""
        return []

    def network_problems(self, config: LearnerConfig, shape: EnvShape) -> list[str]:
        if not config.network:
            return builtin_network_problems(shape.observation_shape, config.env)
        from apex.algorithms.networks import user_network_problems  # torch: a user's only

        return user_network_problems(config.network, shape, "logits and values")

    def exploration_scale(self, settings: ImpalaSettings) -> None:
        """π explores by itself: every env copy samples from it."""
        return None

    def transition_spec(
        self, shape: EnvShape, actor: ActorConfig, settings: ImpalaSettings
    ) -> TransitionSpec:
        """One unroll per item (``apex.algorithms.impala.unrolls``), ``T =
        impala.unroll_length``."""
        steps = settings.unroll_length
        return TransitionSpec.from_dict(
            {
                "obs": ((steps + 1, *shape.observation_shape), shape.observation_dtype),
                "action": ((steps,), "int64"),
                "reward": ((steps,), "float32"),
                "discount": ((steps,), "float32"),
                "log_prob": ((steps,), "float32"),
                "version": ((), "int64"),
            }
        )

    def build_learner(
        self,
        config: LearnerConfig,
        settings: ImpalaSettings,
        shape: EnvShape,
        device: torch.device,
    ) -> Impala:
        from apex.algorithms.networks import PolicyValueNet  # torch: the learner's process

        def builtin():
            return PolicyValueNet(
                shape.observation_shape, shape.actions, config.hidden, shape.observation_high
            )

        network = network_or_builtin(config.network, shape, builtin)
        return Impala(config, settings, shape.observation_shape, shape.actions, device, network)

    def build_acting(
        self, actor: ActorConfig, settings: ImpalaSettings, shape: EnvShape
    ) -> ImpalaActing:
        return ImpalaActing(actor, shape)

    def build_experience(
        self,
        actor: ActorConfig,
        settings: ImpalaSettings,
        shape: EnvShape,
        policy: ImpalaActing,
        version: Callable[[], int],
        frame_refs: bool,
    ) -> UnrollMaker:
        return UnrollMaker(actor, settings.unroll_length, shape, policy, version, frame_refs)
