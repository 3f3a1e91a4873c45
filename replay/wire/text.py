"""Text and JSON payloads on the wire: a message's u8 array of UTF-8 (INFO and SPEC
replies, ERROR, apex's weight metadata)."""

from __future__ import annotations

import json

import numpy as np

from replay.errors import ProtocolError


def text_array(text: str) -> np.ndarray:
    """UTF-8 text (or JSON) as a u8 array, the payload of text-carrying kinds."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def array_json(array: np.ndarray, what: str = "payload") -> object:
    """The JSON value of a text payload (:func:`text_array`); ``what`` names it in errors.

    Raises:
        ProtocolError: not 1-D u8 UTF-8, not JSON, or nested too deep to parse.
    """
    try:
        return json.loads(array_text(array))
    except (ValueError, RecursionError) as exc:  # RecursionError: [[[[...]]]] past the stack
        raise ProtocolError(f"malformed {what}: {type(exc).__name__}: {exc}") from None


def array_text(array: np.ndarray) -> str:
    """The inverse of :func:`text_array`.

    Raises:
        ProtocolError: not a 1-D u8 array of valid UTF-8.
    """
    if array.dtype != np.uint8 or array.ndim != 1:
        raise ProtocolError(f"text payload must be 1-D uint8, got {array.dtype} {array.shape}")
    try:
        return array.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"text payload is not UTF-8: {exc}") from None
