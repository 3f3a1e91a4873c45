"""Exceptions raised by the replay package.

Every error carries the offending field, index or value in its message, so a caller can
tell what was wrong without a debugger. All derive from :class:`ReplayError`, which
derives from ``ValueError`` for the input errors, so generic handlers still work.
"""

from __future__ import annotations


class ReplayError(Exception):
    """Base class of every error raised by the replay package."""


class InvalidBatchError(ReplayError, ValueError):
    """A batch of transitions does not match the store's spec (names, shapes, dtypes)."""


class InvalidPriorityError(ReplayError, ValueError):
    """A priority is NaN, infinite, negative, or overflows when raised to the exponent."""


class InvalidIndexError(ReplayError, ValueError):
    """A slot index is outside ``[0, capacity)`` or arrays disagree in length."""


class EmptyReplayError(ReplayError):
    """Sampling was asked of a store that holds nothing with positive priority."""


class ProtocolError(ReplayError, ValueError):
    """A wire message is malformed: bad header, unknown version or kind, frames that
    disagree with the header, or arrays that do not match the receiver's spec."""


class ReplayTimeout(ReplayError):
    """A shard did not answer, or accept data, within the timeout."""


class ShardError(ReplayError):
    """A shard answered a request with an ERROR message."""


class SpecMismatchError(ReplayError, ValueError):
    """A shard stores different fields than the client was configured for."""


class SnapshotError(ReplayError):
    """A snapshot that cannot be written or used (missing, truncated, corrupted, other)."""


class ConfigError(ReplayError, ValueError):
    """Every problem found in a config, one per line (``problems``), found at once."""

    def __init__(self, problems: list[str], what: str = "run config") -> None:
        super().__init__(f"invalid {what}:\n  - " + "\n  - ".join(problems))
        self.problems = problems
