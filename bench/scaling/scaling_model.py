"""The scaling model: each point's env steps/s and the knee of a scaling task, predicted
from unit costs measured here and checked against a sweep (``apex bench model --scaling``).

A point of N actor processes, each stepping its k env copies in turn, makes the least of

- **env steps**: ``N / (env_wall_s + actor_cpu_s)``: every actor on a core of its own, a
  step taking its env's wall time and the actor's CPU for it;
- **the machine**: ``cores / per_step``, every role sharing this machine's cores, where an
  env step costs an actor's CPU for it (its env's included: measured among N processes
  stepping the env where known, else ``env_cpu_s + actor_cpu_s``), ``shard_step_s``, and
  ``samples_per_insert / batch`` of an update, which costs the learner
  ``learner_update_s`` and, once every ``publish_period`` updates, each of the N actor
  processes ``publication_s`` (the learner's copy sent, the actor's loaded);
- **the learner**: its updates/s among N such processes where measured (else
  ``1 / learner_update_s``, a core of its own), times ``batch / samples_per_insert`` env
  steps an update (the rate limiter couples them).

The evaluator is left out (a throughput sweep runs none; in a sweep to a solve it runs
niced and takes what the roles leave). The knee is the actor count where the env-step
line meets the lesser of the other two.

Its unit costs are measured by ``bench.scaling.scaling_units``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from bench.system.cost_model import check

TOLERANCE = 0.25
# The Ape-X paper's learner sampled 19 batches of 512 a second from 360 actors' 35
# transitions a second each: 0.77 sampled per inserted, the ratio a preset without a rate
# limiter (Pong's) is planned at.
PAPER_REPLAY_RATIO = 19 * 512 / (360 * 35)
# The CUDA learner's committed rates on an H200, Nature CNN at a batch of 512: its update
# alone in a CUDA graph (``apex bench learner --device cuda``), and a whole Pong run with
# 40 actors (bench/results/pong-cuda-h200-2026-11-28/).
CUDA_LEARNER_RATES = {"update alone (H200)": 278.0, "whole Pong run (H200)": 91.0}


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
