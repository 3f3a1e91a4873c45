"""The scaling benchmark's tasks: a preset's env whose steps cost a fixed time
(``bench.scaling.step_cost``), trained on the preset's own settings at every actor count.

Every point of a sweep runs the same settings (replay ratio, batch, learning rate, ε spread
over the run's copies, evaluation rule); only ``actors`` changes, so each point learns from
the same data per update and a faster solve comes from more data per second alone.
Evaluation seeds are 0-4; nothing here was tuned on them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from bench.scaling.step_cost import cost_problems

# Powers of two up to 64; 128 and 256 where the machine holds them (asked for by name).
ACTOR_COUNTS = (1, 2, 4, 8, 16, 32, 64)
FIVE_SEEDS = (0, 1, 2, 3, 4)
# Evaluations played at once (learner.eval_lanes): 20 greedy episodes of a solved CartPole
# at 5 ms a step take 2.5 s, and 100 more to confirm as long again.
EVAL_LANES = 4
# Cadence points kept for evaluation (CartPole's weights: 70 KB each).
EVAL_BACKLOG = 512


@dataclass(frozen=True)
class ScalingTask:
    """One task of the scaling benchmark.

    Attributes:
        name: what ``--task`` calls it and records name it by.
        env: the preset whose settings, threshold and gymnasium id it keeps.
        cost_s: seconds each step and reset costs.
        cost_kind: ``"sleep"`` (a simulator on a core elsewhere) or ``"cpu"`` (one on this
            machine's cores, competing for them).
        target: the greedy mean that solves it, confirmed on ``confirm_episodes``.
        budget_s: the learner's training seconds a run may take (``apex train --max-time``).
        eval_every_steps, eval_episodes, confirm_episodes: the evaluation rule.
        checkpoints_s: training seconds at which each run's greedy return is read.
        settings: more ``--set`` settings every run gets.
        weak_from: 0, or the actor count past which the learner's batch grows with the
            actors (``batch · N / weak_from``, as SRL's weak scaling does): the updates per
            second a point needs then stay those of ``weak_from`` actors.
        throughput_only: every run trains for the whole budget (a solve does not end it)
            and a point reports its throughput alone (see :func:`throughput_task`).
    """

    name: str
    env: str
    cost_s: float
    cost_kind: str
    target: float
    budget_s: float
    eval_every_steps: int = 2_000
    eval_episodes: int = 20
    confirm_episodes: int = 100
    checkpoints_s: tuple[float, ...] = (15.0, 30.0, 60.0, 120.0)
    settings: tuple[str, ...] = ()
    weak_from: int = 0
    throughput_only: bool = False

    def __post_init__(self) -> None:
        problems = cost_problems(self.cost_s, self.cost_kind)
        if problems:
            raise ValueError(f"scaling task {self.name}: {'; '.join(problems)}")

    def batch_size(self, actors: int) -> int:
        """The learner's batch at ``actors``: the preset's, grown past ``weak_from``."""
        from apex.envs.presets import preset

        base = int(preset(self.env).settings_for("dqn").get("learner", {}).get("batch_size", 0))
        if not base:
            raise ValueError(f"the {self.env} preset names no learner.batch_size to scale")
        if self.weak_from and actors > self.weak_from:
            return base * actors // self.weak_from
        return base

    def run_arguments(self, seed: int, run_dir: str) -> list[str]:
        """What every run of the task starts with, by ``apex train`` or by
        ``apex slurm submit``: its env, seed, budget, target and run directory."""
        return [
            "--env",
            self.env,
            "--seed",
            str(seed),
            "--max-time",
            str(self.budget_s),
            "--target-return",
            str(self.target),
            "--run-dir",
            run_dir,
        ]

    def train_settings(self, actors: int = 1) -> list[str]:
        """``apex train --set`` values: the env made through the step cost, under the
        preset's name (so its settings and threshold stay), the evaluation rule, and for
        a weak-scaling point its grown batch."""
        values = {
            "env.make": "bench.scaling.step_cost:make",
            "env.kwargs.id": self.env,
            "env.kwargs.cost_s": self.cost_s,
            "env.kwargs.cost_kind": self.cost_kind,
            "learner.eval_every_steps": self.eval_every_steps,
            "learner.eval_episodes": self.eval_episodes,
            "learner.confirm_episodes": self.confirm_episodes,
            # An evaluation's episodes side by side: about one episode's time at any cost;
            # and several evaluations at once, so weights published while one plays are
            # evaluated too: a solve is seen within a cadence point or so at any count.
            "learner.eval_stepping": "threads",
            "learner.eval_lanes": EVAL_LANES,
            # Every cadence point evaluated, in order, however late: the solve is found at
            # the first point that reaches it, at every count alike.
            "learner.eval_backlog": EVAL_BACKLOG,
        }
        if self.weak_from and actors > self.weak_from:
            values["learner.batch_size"] = self.batch_size(actors)
        if self.throughput_only:
            values["learner.stop_when_solved"] = False
        # A JSON value of strings, numbers and booleans is TOML's too.
        return [f"{key}={json.dumps(value)}" for key, value in values.items()] + list(self.settings)


TASKS = {
    task.name: task
    for task in (
        # A simulator elsewhere: each step waits 5 ms without a core, so one actor of 8
        # copies stepped in turn carries about 200 steps/s, and 32 of them what 32 cores
        # of simulator would.
        ScalingTask("cartpole-sleep5ms", "CartPole-v1", 0.005, "sleep", 475.0, 900.0),
        # A simulator on this machine: each step busy for 1 ms of CPU; two actors fill
        # the two cores, and the learner and evaluator compete with them. Its evaluations
        # pay the busy-wait too (a confirmation of 100 solved episodes: 50 s of a core), so
        # they come every 10,000 env steps, at every count alike.
        ScalingTask(
            "cartpole-cpu1ms", "CartPole-v1", 0.001, "cpu", 475.0, 300.0, eval_every_steps=10_000
        ),
    )
}


def throughput_task(task: ScalingTask, seconds: float) -> ScalingTask:
    """``task`` measured for its throughput: every run trains ``seconds`` with the same
    settings but no evaluator, and is not ended by a solve, so a point's rates are the
    system's alone, from the same window at every count (what the scaling model predicts,
    and counts too many for five seeds to a solve)."""
    return replace(
        task, budget_s=seconds, checkpoints_s=(), eval_every_steps=0, throughput_only=True
    )


def quick_task(task: ScalingTask) -> ScalingTask:
    """The plumbing of a sweep in seconds: no figure."""
    return replace(task, budget_s=8.0, checkpoints_s=(4.0,))
