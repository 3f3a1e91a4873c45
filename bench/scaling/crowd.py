"""A crowd of simulators: N processes stepping a scaling task's env at once, as N actor
processes do, beside which the scaling model measures a real run's actor and learner
(``bench.scaling.scaling_units.crowd_costs``).

On a machine with more actor processes than cores, every env step that waits (a sleep)
ends in a wake-up, and every wake-up finds caches another process has just used: a step,
and the work of every role beside it, costs more CPU than it does alone. The model
measures that among a crowd rather than assuming it.

``python -m bench.scaling.crowd '<json>'`` (``{"task", "processes", "seconds"}``) steps
until ``seconds`` have passed; SIGTERM ends it early, its steppers killed and reaped first
(not left to init).
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import sys
import time


def _step_until(task_name: str, deadline: float, index: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from bench.scaling.scaling_tasks import TASKS
    from bench.scaling.step_cost import make

    task = TASKS[task_name]
    env = make(task.env, task.cost_s, task.cost_kind)
    env.reset(seed=index)
    env.action_space.seed(index)
    while time.monotonic() < deadline:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()


def crowd(task_name: str, processes: int, seconds: float) -> None:
    """``processes`` forked processes stepping ``task_name``'s env for ``seconds``."""
    import gymnasium  # noqa: F401  (imported once, before the fork)

    from bench.scaling.scaling_tasks import TASKS

    TASKS[task_name].batch_size(1)  # the preset read before the fork too
    context = multiprocessing.get_context("fork")
    deadline = time.monotonic() + seconds
    children = [
        context.Process(target=_step_until, args=(task_name, deadline, i)) for i in range(processes)
    ]

    def stop(signum, frame) -> None:
        for child in children:
            if child.pid is not None:
                child.kill()
        for child in children:
            if child.pid is not None:
                child.join(30)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    for child in children:
        child.start()
    for child in children:
        child.join(seconds + 60)


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    crowd(request["task"], request["processes"], request["seconds"])
