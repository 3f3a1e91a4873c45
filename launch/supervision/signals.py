"""Stop handlers: SIGINT or SIGTERM asks for a clean stop (final checkpoint or snapshot).

A second SIGINT kills: a person at a terminal who presses Ctrl-C again means it. A
second SIGTERM is the same request again, never a kill: whoever sends TERM (Slurm, our
supervisor, systemd) follows with SIGKILL after its own grace period, and a Slurm job's
end can bring more than one (the learner's task and the batch script both stop the
job's steps); taking the second as a kill cut shards' final snapshots short. So the first
SIGTERM also sets the signal to be ignored: Python puts its handlers back to the default
while the interpreter shuts down, and a repeated TERM arriving then killed a shard that had
already written its final snapshot and stopped (its task reported exit code 241).
For the same reason a role that ends by itself (a learner that solved, an actor at its
step limit) ignores SIGTERM once it is exiting: a stop request that arrives then, as a
user's Ctrl-C reaches the supervisor while the learner finishes, has nothing left to stop,
and under the default handler it killed a learner whose final checkpoint was written.

The handler only calls the given stop function (which sets an event) and, for SIGINT,
restores the previous handler; it never logs or does work inside the signal context.
"""

from __future__ import annotations

import atexit
import signal
from collections.abc import Callable


def on_stop_signal(stop: Callable[[], None]) -> None:
    previous_interrupt = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum, frame) -> None:
        stop()
        signal.signal(signal.SIGINT, previous_interrupt)

    def on_terminate(signum, frame) -> None:
        stop()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # survives shutdown, unlike a handler

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_terminate)
    # Exit handlers run after the threads have joined and before Python resets its handlers.
    atexit.register(signal.signal, signal.SIGTERM, signal.SIG_IGN)
