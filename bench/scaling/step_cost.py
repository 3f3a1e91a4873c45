"""An env whose every step (and reset) costs a fixed time, as a simulator's would: the
scaling benchmark's tasks.

Two kinds of cost, and they stand for different hardware:

- ``"sleep"``: the step waits ``cost_s`` without using a core, as an env whose simulator
  runs on a core of its own elsewhere (another node, a service). More actors then buy what
  more nodes would: this 2-core machine can hold many such actors. TorchRL's collector
  benchmark gives its fake env this kind of latency.
- ``"cpu"``: the step busy-waits until its thread has used ``cost_s`` of CPU time
  (``time.thread_time``), as a simulator on this machine's own cores: actors then compete
  for them, and more actors than cores cannot step faster. PufferLib's synthetic env
  busy-waits this way.

A record that uses one names it (``cost_kind`` in the env's arguments travels into every
run record); a figure measured with one is never presented as the other.

Use it from a run config as an env factory::

    [env]
    make = "bench.scaling.step_cost:make"
    id = "CartPole-v1-sleep5ms"
    kwargs = { id = "CartPole-v1", cost_s = 0.005, cost_kind = "sleep" }
"""

from __future__ import annotations

import time
from typing import Any, Literal

import gymnasium as gym

CostKind = Literal["sleep", "cpu"]
COST_KINDS: tuple[str, ...] = ("sleep", "cpu")
# A step's cost is bounded: past a second a step, a run of any length is a stall, not a
# simulator, and a typo of milliseconds for seconds should be refused.
MAX_COST_S = 1.0


def cost_problems(cost_s: float, cost_kind: str) -> list[str]:
    """Every problem with a step cost (empty if none)."""
    problems = []
    if not isinstance(cost_s, (int, float)) or not 0.0 <= cost_s <= MAX_COST_S:
        problems.append(f"cost_s must be a number of seconds in [0, {MAX_COST_S}], got {cost_s!r}")
    if cost_kind not in COST_KINDS:
        problems.append(f"cost_kind must be one of {COST_KINDS}, got {cost_kind!r}")
    return problems


def spend(cost_s: float, cost_kind: CostKind) -> None:
    """Spends ``cost_s`` as ``cost_kind`` says: asleep, or busy on this thread's CPU time."""
    if cost_s <= 0.0:
        return
    if cost_kind == "sleep":
        time.sleep(cost_s)
        return
    until = time.thread_time() + cost_s
    while time.thread_time() < until:
        pass


class StepCost(gym.Wrapper):
    """``env`` with ``cost_s`` spent before each ``step`` and ``reset`` returns.

    Args:
        env: the env to slow down; its spaces, rewards and episodes are unchanged.
        cost_s: seconds per step and per reset, in ``[0, MAX_COST_S]``.
        cost_kind: ``"sleep"`` (a simulator elsewhere) or ``"cpu"`` (one on this machine).

    Raises:
        ValueError: a cost or kind out of range.
    """

    def __init__(self, env: gym.Env, cost_s: float, cost_kind: CostKind = "sleep") -> None:
        problems = cost_problems(cost_s, cost_kind)
        if problems:
            raise ValueError("; ".join(problems))
        super().__init__(env)
        self.cost_s = float(cost_s)
        self.cost_kind: CostKind = cost_kind

    def step(self, action):
        spend(self.cost_s, self.cost_kind)
        return self.env.step(action)

    def reset(self, **kwargs):
        spend(self.cost_s, self.cost_kind)
        return self.env.reset(**kwargs)


def make(id: str, cost_s: float, cost_kind: CostKind = "sleep", **kwargs: Any) -> gym.Env:
    """``gym.make(id, **kwargs)`` whose steps cost ``cost_s`` each (``[env] make``).

    Raises:
        ValueError: a cost or kind out of range.
        gymnasium.error.Error: an unknown id.
    """
    problems = cost_problems(cost_s, cost_kind)
    if problems:
        raise ValueError("; ".join(problems))
    return StepCost(gym.make(id, **kwargs), cost_s, cost_kind)
