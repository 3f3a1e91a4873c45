"""One actor's env copies stepped serially, on threads or in processes
(``actor.env_stepping``), on the scaling tasks' envs: env steps/s against the rate the
step cost allows (``apex bench scaling --stepping``).

Each case steps an actor's vector env (``apex.envs.vector.actor_envs``) of ``copies``
copies with random actions for ``seconds``, after a warm-up step, and reports env steps/s
over ``repeats`` timed repeats. The ideal is ``copies / cost_s`` when the copies step side
by side and ``1 / cost_s`` serially; with a CPU cost the copies can be side by side only
on as many cores as the machine has, so on this 2-core machine the processes' ideal is
``min(copies, cores) / cost_s``, and threads cannot beat serial (the busy-wait holds
Python's lock).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from apex.envs.presets import EnvPreset, register, unregister
from apex.envs.stepping import ENV_STEPPINGS
from apex.envs.vector import actor_envs
from bench.report import ok_record
from bench.scaling.scaling_tasks import ScalingTask

SUITE = "stepping"


def _preset(task: ScalingTask) -> EnvPreset:
    kwargs = {"id": task.env, "cost_s": task.cost_s, "cost_kind": task.cost_kind}
    return EnvPreset(
        task.name, task.target, gym_id=task.name, make="bench.scaling.step_cost:make", kwargs=kwargs
    )


def steps_per_s(task: ScalingTask, copies: int, stepping: str, seconds: float) -> float:
    """Env steps/s of one actor's ``copies`` copies of ``task``'s env stepped as ``stepping``."""
    envs = actor_envs(task.name, copies, stepping=stepping)
    try:
        envs.reset(seed=list(range(copies)))
        rng = np.random.default_rng(0)
        actions = envs.single_action_space.n
        envs.step(rng.integers(0, actions, copies))  # warm: threads and processes started
        steps, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            envs.step(rng.integers(0, actions, copies))
            steps += copies
        return steps / (time.monotonic() - started)
    finally:
        envs.close()


def run(
    tasks: list[ScalingTask],
    copies: int = 8,
    seconds: float = 3.0,
    repeats: int = 3,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Every stepping mode on every task."""
    cores = os.cpu_count() or 1
    records = []
    for task in tasks:
        register(_preset(task))
        try:
            for stepping in ENV_STEPPINGS:
                if progress:
                    progress(f"stepping {task.name}: {copies} copies, {stepping}")
                rates = [steps_per_s(task, copies, stepping, seconds) for _ in range(repeats)]
                side_by_side = copies if task.cost_kind == "sleep" else min(copies, cores)
                ideal = (1 if stepping == "serial" else side_by_side) / task.cost_s
                if task.cost_kind == "cpu" and stepping == "threads":
                    ideal = 1 / task.cost_s  # one Python lock for the busy-waits
                records.append(
                    ok_record(
                        SUITE,
                        task.name,
                        stepping,
                        "env_steps_per_s",
                        "steps/s",
                        rates,
                        {
                            "copies": copies,
                            "cost_s": task.cost_s,
                            "cost_kind": task.cost_kind,
                            "ideal_steps_per_s": ideal,
                            "cores": cores,
                        },
                    )
                )
        finally:
            unregister(task.name)
    ratios = []
    for task in tasks:
        mine = {r["implementation"]: r for r in records if r["case"] == task.name}
        for stepping in ("threads", "processes"):
            ratios.append(
                {
                    "suite": SUITE,
                    "case": task.name,
                    "metric": "env_steps_per_s",
                    "numerator": stepping,
                    "denominator": "serial",
                    "ratio": mine[stepping]["median"] / mine["serial"]["median"],
                }
            )
    config = {
        "copies": copies,
        "seconds": seconds,
        "repeats": repeats,
        "cores": cores,
        "tasks": [vars(t) for t in tasks],
    }
    return {"records": records, "ratios": ratios, "config": config}
