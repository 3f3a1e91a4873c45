"""The scaling model: each point's env steps/s and the knee of a scaling task, predicted
from unit costs measured here and checked against a sweep (``apex bench model --scaling``).

A point of N actor processes, each stepping its k env copies in turn, makes the least of

- **env steps**: ``N / (env_wall_s + actor_cpu_s)``: every actor on a core of its own, a
  step taking its env's wall time and the actor's CPU for it;
- **the machine**: ``cores / per_step``, every role sharing this machine's cores, where an
  env step costs ``env_cpu_s + actor_cpu_s + shard_step_s`` and ``samples_per_insert /
  batch`` of an update, which costs the learner ``learner_update_s`` and, once every
  ``publish_period`` updates, each of the N actor processes ``publication_s`` (the
  learner's copy sent, the actor's loaded);
- **the learner**: ``1 / learner_update_s`` updates/s on one core, times ``batch /
  samples_per_insert`` env steps an update (the rate limiter couples them).

The evaluator is left out (a throughput sweep runs none; in a sweep to a solve it runs
niced and takes what the roles leave). The knee is the actor count where the env-step
line meets the lesser of the other two.

Unit costs (:func:`measure_units`):

- the task's env stepped alone: its wall time per step on an idle machine, and its CPU per
  step with every other core busy (on this VM a sleep's wake-up costs several times more
  CPU on an idle machine than on a busy one, and only a busy machine is bound by CPU);
- a run of the task's preset on its plain env (no step cost), 1 actor, no evaluation, the
  learner pinned to a core of its own and the rest to the other: the learner, busy all
  the time, gives its CPU per update; the actor its CPU per env step beyond the plain
  env's; the shard its CPU per env step at the preset's ``samples_per_insert``;
- a learner's weights published to 8 actor policies in one process: CPU per copy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.scaling.scaling_tasks import ScalingTask
from bench.system.cost_model import check
from bench.system.system_suite import measure_training
from bench.workers import REPO_ROOT, worker_env
from launch.local.processes import run_processes
from launch.views.binding import rate_between, training_records

TOLERANCE = 0.25
# The Ape-X paper's learner sampled 19 batches of 512 a second from 360 actors' 35
# transitions a second each: 0.77 sampled per inserted, the ratio a preset without a rate
# limiter (Pong's) is planned at.
PAPER_REPLAY_RATIO = 19 * 512 / (360 * 35)
# The CUDA learner's committed rates on an H200, Nature CNN at a batch of 512: its update
# alone in a CUDA graph (``apex bench learner --device cuda``), and a whole Pong run with
# 40 actors (bench/results/pong-cuda-h200-2026-11-28/).
CUDA_LEARNER_RATES = {"update alone (H200)": 278.0, "whole Pong run (H200)": 91.0}
# A crowd's learner may sample this many updates a second from its one actor's data: more
# than it can take, so that it is never held. It starts at this replay size.
CROWD_LEARNER_WANTS = 2_000
CROWD_MIN_SIZE = 500
# The calibration's learner must use this much of its core to be called busy throughout.
LEARNER_BUSY = 0.85


@dataclasses.dataclass(frozen=True)
class ScalingUnits:
    """What a scaling task's work costs here (seconds of wall or CPU)."""

    task: str
    cores: int
    batch: int
    samples_per_insert: float
    publish_period: int
    env_wall_s: float  # one step of the task's env, wall
    env_cpu_s: float  # the same, CPU, on a busy machine
    actor_cpu_s: float  # an actor process's CPU per env step beyond its env
    learner_update_s: float  # the learner's CPU per update
    shard_step_s: float  # the shards' CPU per env step (its inserts, samples, priorities)
    publication_s: float  # one publication to one actor process, both ends
    # Per actor count (a string, as JSON keeps it): an actor's CPU per env step (its
    # env's included) and the learner's updates/s, among that many processes stepping the
    # env (``crowd_costs``); a count not measured takes ``env_cpu_s + actor_cpu_s`` and
    # the learner's rate alone.
    crowd: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    @property
    def per_actor_steps(self) -> float:
        """Env steps/s of one actor on a core of its own."""
        return 1.0 / (self.env_wall_s + self.actor_cpu_s)

    def per_step_cpu_s(self, actors: int) -> float:
        """The machine's CPU per env step with ``actors`` actor processes."""
        alone = self.env_cpu_s + self.actor_cpu_s
        actor_step_s = self.crowd.get(str(actors), (alone, 0.0))[0]
        per_update = self.learner_update_s + actors * self.publication_s / self.publish_period
        return actor_step_s + self.shard_step_s + per_update * self.samples_per_insert / self.batch

    def learner_steps(self, actors: int) -> float:
        """Env steps/s the learner takes among ``actors`` processes."""
        updates = self.crowd.get(str(actors), (0.0, 1.0 / self.learner_update_s))[1]
        return updates * self.batch / self.samples_per_insert

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def limits(units: ScalingUnits, actors: int) -> dict[str, float]:
    """Env steps/s each part allows at ``actors`` actor processes."""
    return {
        "env steps": actors * units.per_actor_steps,
        "the machine's cores": units.cores / units.per_step_cpu_s(actors),
        "the learner": units.learner_steps(actors),
    }


def predict(units: ScalingUnits, actors: int) -> dict:
    """The point's env steps/s and updates/s, and which part binds it."""
    bounds = limits(units, actors)
    binds = min(bounds, key=bounds.get)
    steps = bounds[binds]
    return {
        "actors": actors,
        "env_steps_per_s": steps,
        "updates_per_s": steps * units.samples_per_insert / units.batch,
        "bound_by": binds,
        "limits": bounds,
    }


def knee(units: ScalingUnits, counts: Sequence[int] = ()) -> dict:
    """Where adding actors stops adding env steps: the first of ``counts`` (those the
    crowd was measured at, when not given) whose env-step line reaches the lesser of the
    machine and the learner, and the actor count at which the line meets that bound
    there. None where no count reaches it."""
    for actors in sorted(counts or (int(n) for n in units.crowd)):
        bounds = limits(units, actors)
        others = {k: v for k, v in bounds.items() if k != "env steps"}
        binds = min(others, key=others.get)
        if bounds["env steps"] >= others[binds]:
            return {
                "actors": actors,
                "meets_at": others[binds] / units.per_actor_steps,
                "env_steps_per_s": others[binds],
                "bound_by": binds,
            }
    return {"actors": None, "meets_at": None, "env_steps_per_s": None, "bound_by": None}


def check_points(units: ScalingUnits, config: dict, source: str) -> list[dict]:
    """Each measured point of a scaling record's ``config`` against its prediction."""
    checks = []
    for point in config["points"]:
        measured = point.get("env_steps_per_s")
        if not measured:
            continue
        predicted = predict(units, point["actors"])
        checks.append(
            {
                "source": source,
                "actors": point["actors"],
                "bound_by": predicted["bound_by"],
                "measured_bound_by": point.get("bound_by"),
                **check(predicted["env_steps_per_s"], measured, TOLERANCE),
            }
        )
    return checks


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


def crowd_costs(task: ScalingTask, actors: int, seconds: float) -> list[float]:
    """``[an actor's CPU per step, learner updates/s]`` among ``actors`` processes stepping the
    task's env: one a run's actor (the task's env and settings, no evaluation, so many
    samples an insert that the learner is never held), the rest a crowd of bare steppers
    (``bench.scaling.crowd``): the run's actor's CPU per env step (its env's included),
    and its learner's rate."""
    rate = 1.0 / _step_env(task, 50)[0]  # one actor's env steps/s, about
    ratio = CROWD_LEARNER_WANTS * task.batch_size(1) / rate
    settings = [
        *(s for s in task.train_settings(1) if not s.startswith("learner.eval")),
        f"replay.samples_per_insert={ratio:.1f}",
        f"replay.min_size={CROWD_MIN_SIZE}",
    ]
    crowd = None
    if actors > 1:
        request = {"task": task.name, "processes": actors - 1, "seconds": seconds + 60}
        command = [sys.executable, "-m", "bench.scaling.crowd", json.dumps(request)]
        crowd = subprocess.Popen(
            command, cwd=REPO_ROOT, env=worker_env(), stdout=subprocess.DEVNULL
        )
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
        crowd[str(processes)] = crowd_costs(task, processes, seconds)
    units = units_from(task, window, env_costs, plain_cpu_s, publication_s)
    return dataclasses.replace(units, crowd=crowd), window


def cluster_table(
    actor_step_s: float,
    learner_updates: float,
    batch: int,
    replay_ratio: float,
    node_cores: tuple[int, ...] = (16, 32, 64),
) -> list[dict]:
    """For an env whose step costs ``actor_step_s`` of an actor's CPU (its emulator
    included) and a learner of ``learner_updates`` updates/s of ``batch`` kept at
    ``replay_ratio`` sampled per inserted transition: per node size, the nodes of actors
    (every core an actor's) until the learner binds, and the speedup in env steps/s over
    one node there."""
    wanted = learner_updates * batch / replay_ratio
    rows = []
    for cores in node_cores:
        per_node = cores / actor_step_s
        nodes = wanted / per_node
        rows.append(
            {
                "node_cores": cores,
                "env_steps_per_s_per_node": per_node,
                "learner_env_steps_per_s": wanted,
                "nodes_until_learner_binds": math.ceil(nodes),
                "speedup_there": min(math.ceil(nodes), nodes),
            }
        )
    return rows
