"""The run config's ``[dpg]`` section."""

from __future__ import annotations

from dataclasses import dataclass

from replay.store.field_checks import checked, in_unit_interval, not_positive_integers


@dataclass(frozen=True)
class DPGSettings:
    """Ape-X DPG's own settings: plain DDPG at the defaults, TD3 with ``twin_critics =
    true``, ``policy_delay = 2``, ``target_noise = 0.2``.

    Attributes:
        noise_scale: the actors' base exploration noise σ, as a fraction of half the
            action range; env copy i of N acts with σ_i = σ^(1 + α·i/(N−1)), spread as
            DQN's ε is (α: ``actor.epsilon_alpha``).
        tau: the Polyak rate of the target networks.
        twin_critics: TD3's clipped double-Q (two critics, the smaller target).
        policy_delay: critic updates per policy update.
        target_noise: target policy smoothing, σ of the noise on the target action as a
            fraction of half the action range.
        noise_clip: that noise's bound, in the same unit.
    """

    noise_scale: float = 0.5
    tau: float = 0.005
    twin_critics: bool = False
    policy_delay: int = 1
    target_noise: float = 0.0
    noise_clip: float = 0.5

    def problems(self, prefix: str = "dpg.") -> list[str]:
        def ranges() -> list[str]:
            problems = not_positive_integers({f"{prefix}policy_delay": self.policy_delay})
            problems += in_unit_interval(f"{prefix}tau", self.tau)
            problems += in_unit_interval(f"{prefix}noise_scale", self.noise_scale)
            for name, value in (
                ("target_noise", self.target_noise),
                ("noise_clip", self.noise_clip),
            ):
                if not 0 <= value < float("inf"):
                    problems.append(f"{prefix}{name} must be finite and >= 0, got {value}")
            return problems

        return checked(self, prefix, ranges)
