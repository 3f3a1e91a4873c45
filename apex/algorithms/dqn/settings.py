"""The run config's ``[dqn]`` section."""

from __future__ import annotations

from dataclasses import dataclass

from replay.store.field_checks import (
    checked,
    in_unit_interval,
    not_positive_integers,
    positive_or_none,
)


@dataclass(frozen=True)
class DQNSettings:
    """Ape-X DQN's own settings.

    Attributes:
        epsilon: the actors' base ε, spread over the run's env copies as Ape-X's
            ``ε_i = ε^(1 + α·i/(N−1))`` (α: ``actor.epsilon_alpha``).
        target_update_period: updates between copies of the online network to the target.
        huber_delta: the Huber loss's κ, where its gradient stops growing with ``|δ|``
            (Acme's ``huber_loss_parameter``). The Nature DQN's 1 suits rewards clipped
            to ±1; where returns reach the hundreds, a failure's error of 50 then moves
            the network no more than an error of 1.
        cuda_graph: on CUDA, the update is captured in a CUDA graph and replayed
            (``apex.algorithms.dqn.graphed_step``; the host's kernel launches bound it
            there); False: every update eager.
    """

    epsilon: float = 0.4
    target_update_period: int = 2500
    huber_delta: float = 1.0
    cuda_graph: bool = True

    def problems(self, prefix: str = "dqn.") -> list[str]:
        return checked(
            self,
            prefix,
            lambda: (
                not_positive_integers({f"{prefix}target_update_period": self.target_update_period})
                + in_unit_interval(f"{prefix}epsilon", self.epsilon)
                + positive_or_none({f"{prefix}huber_delta": self.huber_delta})
            ),
        )
