"""Stop handlers: the first SIGINT/SIGTERM asks for a clean stop, a second one kills.

The handler only calls the given stop function (which sets an event) and restores the
previous handler; it never logs or does work inside the signal context.
"""

from __future__ import annotations

import signal
from collections.abc import Callable


def on_stop_signal(stop: Callable[[], None]) -> None:
    previous: dict[int, object] = {}

    def handler(signum, frame) -> None:
        stop()
        signal.signal(signum, previous[signum])

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, handler)
