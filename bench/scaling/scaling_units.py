"""The scaling model's unit costs (``bench.scaling.scaling_model``), measured on this machine
with the real parts.

What :func:`measure_units` measures:

- the task's env stepped alone: its wall time per step on an idle machine, and its CPU per
  step with every other core busy (on this VM a sleep's wake-up costs several times more
  CPU on an idle machine than on a busy one, and only a busy machine is bound by CPU);
- a run of the task's preset on its plain env (no step cost), 1 actor, no evaluation, the
  learner pinned to a core of its own and the rest to the other: the learner, busy all
  the time, gives its CPU per update; the actor its CPU per env step beyond the plain
  env's; the shard its CPU per env step at the preset's ``samples_per_insert``;
- a learner's weights published to 8 actor policies in one process: CPU per copy;
- at every actor count, a run's actor (the task's env, its cost included) and learner
  among that many processes stepping the env (``bench.scaling.crowd``): the actor's CPU
  per step and the learner's updates/s there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.scaling.scaling_model import ScalingUnits
from bench.scaling.scaling_tasks import ScalingTask
from bench.system.system_suite import measure_training
from bench.workers import REPO_ROOT, worker_env
from launch.supervision.processes import run_processes
from launch.views.binding import rate_between, training_records

# A crowd's learner may sample this many updates a second from its one actor's data: more
# than it can take, so that it is never held. It starts at this replay size.
CROWD_LEARNER_WANTS = 2_000
CROWD_MIN_SIZE = 500
# The calibration's learner must use this much of its core to be called busy throughout.
LEARNER_BUSY = 0.85


def _step_env(task: ScalingTask, steps: int) -> tuple[float, float]:
    from bench.scaling.step_cost import make

    env = make(task.env, task.cost_s, task.cost_kind)
    env.reset(seed=0)
    env.action_space.seed(0)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    env.close()
    return wall / steps, cpu / steps


@contextlib.contextmanager
def _other_cores_busy() -> Iterator[None]:
    """A spinning process on every core but this process's first."""
    cores = sorted(os.sched_getaffinity(0))
    spin = "while True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in cores[1:]]
    own = os.sched_getaffinity(0)
    try:
        for spinner, core in zip(spinners, cores[1:], strict=True):
            os.sched_setaffinity(spinner.pid, {core})
        os.sched_setaffinity(0, {cores[0]})
        yield
    finally:
        os.sched_setaffinity(0, own)
        for spinner in spinners:
            spinner.kill()
            spinner.wait(10)


def env_step_costs(task: ScalingTask, steps: int = 300, repeats: int = 3) -> tuple[float, float]:
    """Wall seconds per step of ``task``'s env (its step cost included) on an idle
    machine, and CPU seconds per step with the other cores busy: medians of ``repeats``,
    stepped alone with random actions, resets counted as steps."""
    wall = statistics.median(_step_env(task, steps)[0] for _ in range(repeats))
    with _other_cores_busy():
        cpu = statistics.median(_step_env(task, steps)[1] for _ in range(repeats))
    return wall, cpu


def publication_cost(env: str, subscribers: int = 8, publications: int = 200) -> float:
    """CPU seconds per publication per actor process: the learner's weights (``env``'s
    preset network) sent over its PUB socket and loaded into an actor's acting policy, as
    ``apex.weights`` does, both ends and their I/O threads in this process."""
    import torch
    import zmq

    from apex.algorithms.policy import build_policy
    from apex.envs.families import env_shape
    from apex.weights import WeightPublisher, WeightSubscriber
    from bench.system.cotenant import learner_network
    from launch.config import resolve

    torch.set_num_threads(1)
    hidden = tuple(resolve({"env": env}).learner.hidden)
    shape = env_shape(env)
    network = learner_network(env, hidden)
    policies = [
        build_policy(shape.observation_shape, shape.actions, hidden, seed=0)
        for _ in range(subscribers)
    ]
    context = zmq.Context()
    publisher = WeightPublisher(context)
    readers = [WeightSubscriber(context, publisher.endpoint) for _ in range(subscribers)]
    try:
        version = 0
        deadline = time.monotonic() + 30
        while not all(r.version >= 0 for r in readers):  # every subscription in place
            if time.monotonic() > deadline:
                raise TimeoutError("weights subscribers never joined")
            version += 1
            publisher.publish(network, version)
            for reader, policy in zip(readers, policies, strict=True):
                reader.poll(policy, timeout_ms=10)
        # A PUB keeps one message a subscriber (apex.weights): one sent while the last
        # is still on its way is dropped, as in a run, so the cost is per copy loaded.
        loaded, cpu = sum(r.loaded for r in readers), time.process_time()
        for _ in range(publications):
            version += 1
            publisher.publish(network, version)
            for reader, policy in zip(readers, policies, strict=True):
                reader.poll(policy, timeout_ms=50)
        cpu, loaded = time.process_time() - cpu, sum(r.loaded for r in readers) - loaded
    finally:
        for reader in readers:
            reader.close()
        publisher.close()
        context.destroy(linger=0)
    if not loaded:
        raise TimeoutError("no publication reached a subscriber")
    return cpu / loaded


def _pin(run_dir: Path, learner_core: int, other_cores: set[int]) -> None:
    for pid, role in run_processes(run_dir).items():
        # A process may end between the listing and the pinning.
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {learner_core} if role == "learner" else other_cores)


def calibration_window(
    env: str,
    seconds: float,
    settings: Sequence[str] = (),
    pin: bool = True,
    warm_up_s: float = 4.0,
) -> dict:
    """One run of ``env``'s preset with 1 actor, no evaluation and ``settings`` more
    (``--set`` values), the learner on a core of its own if ``pin``: each role's cores and
    the run's env steps/s and updates/s over a window."""
    cores = sorted(os.sched_getaffinity(0))

    def pinned(run_dir: Path) -> None:
        if pin and len(cores) > 1:
            _pin(run_dir, cores[-1], set(cores[:-1]))

    arguments = ["--env", env, "--actors", "1", "--plain"]
    arguments += [part for setting in settings for part in ("--set", setting)]
    measured = measure_training(arguments, seconds, warm_up_s, pinned)
    window = training_records(measured["window"])
    first, last = window[0], window[-1]
    return {
        "window_s": last["time_s"] - first["time_s"],
        "env_steps_per_s": rate_between(last, first, "env_steps"),
        "updates_per_s": rate_between(last, first, "updates"),
        **{f"{role}_cores": cores_used for role, cores_used in measured["cpu"].items()},
    }


def crowd_costs(task: ScalingTask, actors: int, seconds: float, env_wall_s: float) -> list[float]:
    """``[an actor's CPU per step, learner updates/s]`` among ``actors`` processes stepping the
    task's env: one a run's actor (the task's env and settings, no evaluation, so many
    samples an insert that the learner is never held), the rest a crowd of bare steppers
    (``bench.scaling.crowd``): the run's actor's CPU per env step (its env's included),
    and its learner's rate. ``env_wall_s``: a step's wall time (one actor's env steps/s,
    about, sizes the samples an insert)."""
    ratio = CROWD_LEARNER_WANTS * task.batch_size(1) * env_wall_s
    settings = [
        *(s for s in task.train_settings(1) if not s.startswith("learner.eval")),
        f"replay.samples_per_insert={ratio:.1f}",
        f"replay.min_size={CROWD_MIN_SIZE}",
    ]
    crowd = None
    if actors > 1:
        request = {"task": task.name, "processes": actors - 1, "seconds": seconds + 60}
        command = [sys.executable, "-m", "bench.scaling.crowd", json.dumps(request)]
        crowd = subprocess.Popen(command, cwd=REPO_ROOT, env=worker_env())
    try:
        window = calibration_window(task.env, seconds, settings, pin=False)
    finally:
        if crowd is not None:
            crowd.terminate()  # its steppers killed and reaped first (bench.scaling.crowd)
            crowd.wait(60)
    actor_steps = window["env_steps_per_s"] or 0.0
    actor_step_s = window["actor_cores"] / actor_steps if actor_steps else 0.0
    return [actor_step_s, window["updates_per_s"] or 0.0]


def units_from(
    task: ScalingTask,
    window: dict,
    env_costs: tuple[float, float],
    plain_cpu_s: float,
    publication_s: float,
) -> ScalingUnits:
    """Unit costs from a calibration window (the learner busy throughout: its CPU per
    update is its cores over its updates/s), the env's costs and the plain env's CPU."""
    from launch.config import resolve

    config = resolve({"env": task.env})
    steps = window["env_steps_per_s"]
    return ScalingUnits(
        task=task.name,
        cores=len(os.sched_getaffinity(0)),
        batch=task.batch_size(1),
        samples_per_insert=float(config.replay.samples_per_insert),
        publish_period=config.learner.publish_period,
        env_wall_s=env_costs[0],
        env_cpu_s=env_costs[1],
        actor_cpu_s=max(0.0, window["actor_cores"] / steps - plain_cpu_s),
        learner_update_s=window["learner_cores"] / window["updates_per_s"],
        shard_step_s=window["shard_cores"] / steps,
        publication_s=publication_s,
    )


def measure_units(
    task: ScalingTask,
    seconds: float = 20.0,
    progress: Callable[[str], None] = print,
    counts: Sequence[int] = (),
) -> tuple[ScalingUnits, dict]:
    """The task's unit costs, with the crowd at each of ``counts``, and the calibration
    window they came from.

    Raises:
        ValueError: a preset without a rate limiter (its replay ratio floats), or a
            calibration whose learner was not busy (its CPU per update would hold idle).
    """
    from launch.config import resolve

    if not resolve({"env": task.env}).replay.samples_per_insert:
        raise ValueError(f"the {task.env} preset sets no replay.samples_per_insert to model")
    progress(f"scaling model {task.name}: the env alone")
    env_costs = env_step_costs(task)
    plain = dataclasses.replace(task, cost_s=0.0, cost_kind="sleep")
    with _other_cores_busy():
        plain_cpu_s = _step_env(plain, 2_000)[1]
    progress(f"scaling model {task.name}: weights to actors")
    publication_s = publication_cost(task.env)
    progress(f"scaling model {task.name}: a calibration run, the learner on a core of its own")
    window = calibration_window(task.env, seconds)
    if window["learner_cores"] < LEARNER_BUSY:
        raise ValueError(
            f"the calibration's learner used {window['learner_cores']:.2f} of its core: "
            "not busy throughout, so its CPU per update is not measured"
        )
    crowd = {}
    for processes in sorted(set(counts)):
        progress(f"scaling model {task.name}: a crowd of {processes} stepping processes")
        crowd[str(processes)] = crowd_costs(task, processes, seconds, env_costs[0])
    units = units_from(task, window, env_costs, plain_cpu_s, publication_s)
    return dataclasses.replace(units, crowd=crowd), window
