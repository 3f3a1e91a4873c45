"""Every ``apex bench`` command by name, where it lives, and how ``apex bench run`` runs the
suites it gathers into one report. A new suite is a module of its own, its command, and a
line here; ``bench.commands`` imports a command only when it runs.
"""

from __future__ import annotations

from collections.abc import Callable

# name -> "module:attribute" of each ``apex bench`` command.
COMMANDS = {
    "replay": "bench.parts.part_commands:bench_replay",
    "shard": "bench.parts.part_commands:bench_shard",
    "learner": "bench.parts.part_commands:bench_learner",
    "actor": "bench.parts.part_commands:bench_actor",
    "snapshot": "bench.parts.part_commands:bench_snapshot",
    "frames": "bench.parts.part_commands:bench_frames",
    "system": "bench.system.system_commands:bench_system",
    "faults": "bench.system.system_commands:bench_faults",
    "fleet": "bench.system.system_commands:bench_fleet",
    "model": "bench.system.system_commands:bench_model",
    "learn": "bench.learning.learn_command:bench_learn",
    "lag": "bench.learning.lag_command:bench_lag",
    "fuzz": "bench.faults.fuzz_command:bench_fuzz",
    "soak": "bench.faults.soak_command:bench_soak",
    "compare": "bench.compare_command:bench_compare",
    "arms": "bench.learning.arms_command:bench_arms",
    "scaling": "bench.scaling.scaling_command:bench_scaling",
    "run": "bench.run_command:bench_run",
}

# The suites ``apex bench run`` knows, and those it runs when none is named (frames fills
# a 2M store: it runs when asked for).
RUN_SUITES = ("replay", "shard", "learner", "actor", "system", "learn", "frames")
DEFAULT_RUN = RUN_SUITES[:-1]


def run_suite(
    name: str, quick: bool, memory_bytes: int | None, progress: Callable[[str], None]
) -> dict:
    """Suite ``name`` as ``apex bench run`` runs it (``quick``: every suite tiny)."""
    repeats = 2 if quick else 5
    if name == "replay":
        from bench.parts import replay_suite

        implementations = ("apex", "cpprb", "torchrl") if quick else replay_suite.IMPLEMENTATIONS
        return replay_suite.run(
            quick=quick,
            memory_bytes=memory_bytes,
            progress=progress,
            implementations=implementations,
            repeats=repeats,
        )
    if name == "shard":
        from bench.parts import shard_suite

        return shard_suite.run(
            quick=quick,
            progress=progress,
            repeats=repeats,
            seconds_per_repeat=0.1 if quick else None,
            ingest_rate=20_000.0 if quick else 100_000.0,
        )
    if name == "learner":
        from bench.parts import learner_suite

        return learner_suite.run(quick=quick, repeats=repeats, progress=progress)
    if name == "actor":
        from bench.parts import actor_suite

        return actor_suite.run(quick=quick, repeats=repeats, progress=progress)
    if name == "system":
        from bench.system import system_suite

        return system_suite.run(quick=quick, memory_bytes=memory_bytes, progress=progress)
    if name == "learn":
        from bench.learning import learn_suite, learn_tasks

        task = learn_tasks.TASKS["CartPole-v1"]
        task = learn_tasks.quick_task(task) if quick else task
        return learn_suite.run(task, seeds=task.seeds, progress=progress, warm_up=not quick)
    if name == "frames":
        from bench.parts import frames_suite

        return frames_suite.run(quick=quick, progress=progress)
    raise ValueError(f"apex bench run knows {', '.join(RUN_SUITES)}, not {name!r}")
