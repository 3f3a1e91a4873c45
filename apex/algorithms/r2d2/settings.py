"""The run config's ``[r2d2]`` section."""

from __future__ import annotations

from dataclasses import dataclass

from replay.store.field_checks import checked, in_unit_interval, not_positive_integers


@dataclass(frozen=True)
class R2D2Settings:
    """R2D2's own settings (Kapturowski et al. 2019; their defaults).

    Attributes:
        epsilon: the actors' base ε, spread over the run's env copies as Ape-X's.
        sequence_length: steps per stored sequence ``m``.
        sequence_period: steps between the starts of an env's consecutive sequences
            (``m / 2``: each overlaps the next by half).
        burn_in: steps at a sequence's start that only carry the recurrent state from
            the stored one forward, with no gradient and no loss (``l``); a sequence that
            starts its episode has none.
        n_step: steps of each target's return before it bootstraps.
        lstm_units: the recurrent layer's cells.
        target_update_period: updates between copies of the online network to the target.
        eta: how a sequence's priority mixes its largest absolute TD error with their
            mean (``η max + (1 − η) mean``).
    """

    epsilon: float = 0.4
    sequence_length: int = 80
    sequence_period: int = 40
    burn_in: int = 40
    n_step: int = 5
    lstm_units: int = 512
    target_update_period: int = 2500
    eta: float = 0.9

    def problems(self, prefix: str = "r2d2.") -> list[str]:
        def ranges() -> list[str]:
            problems = not_positive_integers(
                {
                    f"{prefix}{name}": getattr(self, name)
                    for name in (
                        "sequence_length",
                        "sequence_period",
                        "n_step",
                        "lstm_units",
                        "target_update_period",
                    )
                }
            )
            problems += in_unit_interval(f"{prefix}epsilon", self.epsilon)
            problems += in_unit_interval(f"{prefix}eta", self.eta)
            if problems:
                return problems
            if self.sequence_period > self.sequence_length:
                problems.append(
                    f"{prefix}sequence_period ({self.sequence_period}) must be "
                    f"at most {prefix}sequence_length "
                    f"({self.sequence_length})"
                )
            if not 0 <= self.burn_in < self.sequence_length:
                problems.append(
                    f"{prefix}burn_in must be in [0, {prefix}sequence_length), got {self.burn_in}"
                )
            return problems

        return checked(self, prefix, ranges)
