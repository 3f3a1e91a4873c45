"""The run config's ``[impala]`` section."""

from __future__ import annotations

import math
from dataclasses import dataclass

from replay.store.field_checks import checked, not_positive_integers


@dataclass(frozen=True)
class ImpalaSettings:
    """IMPALA's own settings.

    Attributes:
        unroll_length: steps per unroll ``T``: its actors send unrolls
            (``apex.algorithms.impala.unrolls``), not n-step transitions.
        rho_bar: ρ̄, the truncation of the importance weights in the value targets.
        c_bar: c̄, the truncation of the traces (at most ``rho_bar``).
        pg_rho_bar: the truncation of the policy gradient's weights.
        baseline_cost: the value loss's weight.
        entropy_cost: the entropy bonus's weight.
        correction: V-trace's importance weights; false fixes them at 1 (the ablation).
    """

    unroll_length: int = 20
    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    correction: bool = True

    def problems(self, prefix: str = "impala.") -> list[str]:
        def more() -> list[str]:
            found = not_positive_integers({f"{prefix}unroll_length": self.unroll_length})
            for name in ("rho_bar", "c_bar", "pg_rho_bar"):
                value = getattr(self, name)
                if not (isinstance(value, int | float) and value > 0 and not math.isnan(value)):
                    found.append(f"{prefix}{name} must be a positive number, got {value!r}")
            for name in ("baseline_cost", "entropy_cost"):
                value = getattr(self, name)
                if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                    found.append(f"{prefix}{name} must be a finite number >= 0, got {value!r}")
            if not found and self.c_bar > self.rho_bar:
                found.append(
                    f"{prefix}c_bar ({self.c_bar}) must not exceed {prefix}rho_bar ({self.rho_bar})"
                )
            return found

        return checked(self, prefix, more)
