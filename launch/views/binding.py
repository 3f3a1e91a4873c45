"""What holds a run back, named from the figures its progress records already carry, with
the setting that would move it: the one rule that ``apex train``'s live view, ``apex top``,
``apex status`` and the scaling benchmark share.

A run's parts pull against each other through the replay's rate limiter: each shard lets
the learner sample ``samples_per_insert`` items per item inserted. So one of two sides
waits on the other, and the records say which:

- the limiter **holds the actors' inserts**: the learner is behind. More actors add
  nothing; a faster learner (CUDA), a larger batch or a lower replay ratio does. A shard
  that uses a whole core is the learner's bottleneck in its place: more shards.
- the learner's **sample requests wait** at the shards: the actors are behind, so the
  env steps bind the run. More actors, or a slow env's copies stepped side by side.

Beside them, the **evaluator** may fall behind (an evaluation of a slow env played one
episode after another): it holds back no update, but a solve is seen only when an
evaluation plays the weights that reach it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A side waits "most of the time" from this share of records on.
WAITING_SHARE = 0.5
# A process "uses a whole core" from this share of one on, a machine "all its cores" too.
BUSY_SHARE = 0.9
# Evaluations this many cadence points behind the actors' env steps are "behind".
EVALUATIONS_BEHIND = 5


@dataclass(frozen=True)
class Binding:
    """One part that holds the run back.

    Attributes:
        part: "learner", "shard", "env steps", "machine" or "evaluator".
        evidence: the figures that say so.
        remedy: the settings that would move it.
    """

    part: str
    evidence: str
    remedy: str

    def line(self) -> str:
        return f"{self.part} ({self.evidence}): {self.remedy}"


def what_binds(
    *,
    inserts_held: float,
    samples_waited: float,
    shard_cores: Sequence[float] = (),
    machine_busy_cores: float | None = None,
    cores: int | None = None,
) -> Binding | None:
    """What binds training, from shares of time (0-1) in which the limiter held the
    actors' inserts and the learner's requests waited, the shards' CPU cores, and the
    machine's busy cores out of ``cores``; None when neither side waits most of the time.
    """
    busy = (
        machine_busy_cores is not None
        and cores is not None
        and machine_busy_cores >= BUSY_SHARE * cores
    )
    crowded = f"; all {cores} of this machine's cores busy" if busy else ""
    hottest = max(shard_cores, default=0.0)
    if inserts_held >= WAITING_SHARE and hottest >= BUSY_SHARE:
        return Binding(
            "shard",
            f"one uses {hottest:.2f} cores while the limiter holds inserts{crowded}",
            "more shards (shards = N)",
        )
    if inserts_held >= WAITING_SHARE:
        return Binding(
            "learner",
            f"the rate limiter held the actors' inserts {inserts_held:.0%} of the time{crowded}",
            "a faster learner (learner.device = cuda), a "
            "larger learner.batch_size or a lower replay.samples_per_insert; more "
            "actors add nothing",
        )
    if busy:
        return Binding(
            "machine",
            f"all {cores} cores busy, neither side held back",
            "more cores or hosts for the actors (a Slurm job's nodes)",
        )
    if samples_waited >= WAITING_SHARE:
        return Binding(
            "env steps",
            f"the learner waited for data {samples_waited:.0%} of the time",
            "more actors (actors, actor.envs_per_actor); a slow env's copies "
            "side by side (actor.env_stepping = threads or processes)",
        )
    return None


def evaluator_behind(
    env_steps: int | None, evaluated_steps: int | None, every_steps: int | None
) -> Binding | None:
    """The evaluator, where its newest evaluation played weights published
    ``EVALUATIONS_BEHIND`` or more cadence points before the actors' ``env_steps``."""
    if not every_steps or env_steps is None or evaluated_steps is None:
        return None
    behind = env_steps - evaluated_steps
    if behind < EVALUATIONS_BEHIND * every_steps:
        return None
    return Binding(
        "evaluator",
        f"its newest evaluation is {behind:,} env steps behind, "
        f"{behind // every_steps} cadence points",
        "its copies side by side (learner.eval_stepping = threads) or fewer learner.eval_episodes",
    )


def progress_binding(progress: dict | None, shard_cores: Sequence[float] = ()) -> Binding | None:
    """What binds training in one progress record (a shard's back-pressure flags at that
    moment; ``shard_cores`` from the last two records)."""
    shards = (progress or {}).get("shards") or []
    if not progress or not progress.get("updates") or not shards:
        return None
    held = any(s.get("inserts_waiting") for s in shards)
    waited = any((s.get("samples_waiting") or 0) > 0 for s in shards)
    return what_binds(
        inserts_held=float(held), samples_waited=float(waited), shard_cores=shard_cores
    )


def run_binding(progress: Sequence[dict]) -> Binding | None:
    """What bound training over a run's progress records: the shares of records in which
    inserts were held and requests waited, and each shard's CPU from the first record of
    training to the last."""
    training = [r for r in progress if r.get("updates") and r.get("shards")]
    if not training:
        return None
    held = sum(any(s.get("inserts_waiting") for s in r["shards"]) for r in training)
    waited = sum(any((s.get("samples_waiting") or 0) > 0 for s in r["shards"]) for r in training)
    first, last = training[0]["shards"], training[-1]["shards"]
    shard_cores = []
    for before, after in zip(first, last, strict=False):
        elapsed = (after.get("uptime_s") or 0.0) - (before.get("uptime_s") or 0.0)
        if elapsed > 0 and after.get("cpu_s") is not None and before.get("cpu_s") is not None:
            shard_cores.append((after["cpu_s"] - before["cpu_s"]) / elapsed)
    return what_binds(
        inserts_held=held / len(training),
        samples_waited=waited / len(training),
        shard_cores=shard_cores,
    )
