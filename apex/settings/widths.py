"""The networks' widths, checked alike for the actors and the learner."""

from __future__ import annotations

# Past these a network is a typo, not a design: a 10^9-wide layer fails allocating
# gigabytes in every role at once.
MAX_HIDDEN_LAYERS = 16
MAX_HIDDEN_WIDTH = 65_536


def hidden_problems(name: str, hidden: object) -> list[str]:
    """Network widths: one to ``MAX_HIDDEN_LAYERS`` layers of 1 to ``MAX_HIDDEN_WIDTH``."""
    if (
        isinstance(hidden, (tuple, list))
        and 1 <= len(hidden) <= MAX_HIDDEN_LAYERS
        and all(
            isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= MAX_HIDDEN_WIDTH
            for w in hidden
        )
    ):
        return []
    return [
        f"{name} must be 1 to {MAX_HIDDEN_LAYERS} layer widths, each 1 to {MAX_HIDDEN_WIDTH}, "
        f"got {list(hidden) if isinstance(hidden, tuple) else hidden!r}"
    ]
