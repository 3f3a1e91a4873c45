"""A crowd of simulators: N processes stepping a scaling task's env at once, as N actor
processes do, and what each step costs this machine's CPU among them.

On a machine with more actor processes than cores, every env step that waits (a sleep)
ends in a wake-up, and every wake-up finds caches another process has just used: a step,
and the work of every role beside it, costs more CPU than it does alone. The scaling
model (``bench.scaling.scaling_model``) measures that here rather than assuming it.

``python -m bench.scaling.crowd '<json>'`` (``{"task", "processes", "seconds"}``) prints
one JSON line: ``{"steps", "cpu_s", "seconds"}``, the crowd's env steps and CPU seconds
(its processes' own, from the kernel's accounting of reaped children). SIGTERM ends it
early, its steppers killed and reaped first.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time


def _step_until(task_name: str, deadline: float, counts, index: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from bench.scaling.scaling_tasks import TASKS
    from bench.scaling.step_cost import make

    task = TASKS[task_name]
    env = make(task.env, task.cost_s, task.cost_kind)
    env.reset(seed=index)
    env.action_space.seed(index)
    steps = 0
    while time.monotonic() < deadline:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    counts[index] = steps


def crowd(task_name: str, processes: int, seconds: float) -> dict:
    """``processes`` forked processes stepping ``task_name``'s env for ``seconds``."""
    import gymnasium  # noqa: F401  (imported once, before the fork)

    from bench.scaling.scaling_tasks import TASKS

    TASKS[task_name].batch_size(1)  # the preset read before the fork too
    context = multiprocessing.get_context("fork")
    counts = context.Array("q", processes, lock=False)
    before = os.times()
    deadline = time.monotonic() + seconds
    children = [
        context.Process(target=_step_until, args=(task_name, deadline, counts, i))
        for i in range(processes)
    ]

    def stop(signum, frame) -> None:
        """Asked to stop early: the steppers go at once, reaped here (not left to init)."""
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
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return {"steps": int(sum(counts)), "cpu_s": cpu, "seconds": seconds}


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    print(json.dumps(crowd(request["task"], request["processes"], request["seconds"])))
