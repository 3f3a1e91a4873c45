"""R2D2 (Kapturowski et al. 2019): Ape-X's actors, shards and learner with a recurrent
Q-network trained on stored overlapping sequences; a sequence is one item under a
shard's sum-tree, prioritized ``η max|δ| + (1 − η) mean|δ|``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apex.algorithms.defaults_file import load_defaults
from apex.algorithms.network_choice import builtin_network_problems
from apex.algorithms.r2d2.acting import R2D2Acting, SequenceExperience
from apex.algorithms.r2d2.settings import R2D2Settings
from replay.store.spec import TransitionSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from apex.algorithms.r2d2.learning import R2D2
    from apex.envs.families import EnvShape
    from apex.settings import ActorConfig, LearnerConfig


class R2D2Builder:
    """``apex.algorithms.protocols.AlgorithmBuilder`` of R2D2."""

    name = "r2d2"
    continuous = False
    replay = "prioritized"
    exploration_symbol = "ε"
    items = "sequences"
    settings_type = R2D2Settings
    # A replay item is a sequence: capacity and warm-up count sequences.
    defaults = load_defaults(__file__)
    run_defaults = defaults.run

    def shape_problems(self, shape: EnvShape, env: str) -> list[str]:
        return []

    def network_problems(self, config: LearnerConfig, shape: EnvShape) -> list[str]:
        if config.network:
            return [
                "learner.network: R2D2 builds its recurrent network itself (a torso, an "
                "LSTM and a dueling head); a user's network is for DQN and IMPALA"
            ]
        return builtin_network_problems(shape.observation_shape, config.env)

    def exploration_scale(self, settings: R2D2Settings) -> float:
        return settings.epsilon

    def transition_spec(
        self, shape: EnvShape, actor: ActorConfig, settings: R2D2Settings
    ) -> TransitionSpec:
        """One sequence per item (``apex.algorithms.r2d2.sequences``)."""
        steps = settings.sequence_length
        return TransitionSpec.from_dict(
            {
                "obs": ((steps + 1, *shape.observation_shape), shape.observation_dtype),
                "action": ((steps,), "int64"),
                "reward": ((steps,), "float32"),
                "discount": ((steps,), "float32"),
                "mask": ((steps,), "float32"),
                "state": ((2, settings.lstm_units), "float32"),
                "burn_in_state": ((2, settings.lstm_units), "float32"),
                "starts": ((), "float32"),
            }
        )

    def build_learner(
        self, config: LearnerConfig, settings: R2D2Settings, shape: EnvShape, device: torch.device
    ) -> R2D2:
        from apex.algorithms.r2d2.learning import R2D2  # torch: the learner's process
        from apex.algorithms.r2d2.network import RecurrentQNetwork

        network = RecurrentQNetwork(
            shape.observation_shape,
            shape.actions,
            config.hidden,
            settings.lstm_units,
            shape.observation_high,
        )
        return R2D2(config, settings, network, device)

    def build_acting(
        self, actor: ActorConfig, settings: R2D2Settings, shape: EnvShape
    ) -> R2D2Acting:
        return R2D2Acting(actor, shape, settings)

    def build_experience(
        self,
        actor: ActorConfig,
        settings: R2D2Settings,
        shape: EnvShape,
        policy: R2D2Acting,
        version: Callable[[], int],
        frame_refs: bool,
    ) -> SequenceExperience:
        return SequenceExperience(actor, settings, shape, policy, frame_refs)
