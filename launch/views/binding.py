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


def rate_between(
    new: dict | None, old: dict | None, key: str, clock: str = "time_s"
) -> float | None:
    """``key``'s change per second of ``clock`` between two records, or None (a record or
    a value missing, or no time between them)."""
    if not new or not old:
        return None
    values = new.get(key), old.get(key), new.get(clock), old.get(clock)
    if any(v is None for v in values) or values[2] <= values[3]:
        return None
    return (values[0] - values[1]) / (values[2] - values[3])


def inserts_held(record: dict) -> bool:
    """Whether a shard's rate limiter held the actors' inserts at this progress record."""
    return any(s.get("inserts_waiting") for s in record.get("shards") or [])


def samples_waited(record: dict) -> bool:
    """Whether the learner's sample requests waited at a shard at this progress record."""
    return any((s.get("samples_waiting") or 0) > 0 for s in record.get("shards") or [])


def shard_cores(first: dict, last: dict) -> list[float]:
    """Each shard's CPU cores between two progress records (its own clock, ``uptime_s``)."""
    pairs = zip(first.get("shards") or [], last.get("shards") or [], strict=False)
    cores = (rate_between(after, before, "cpu_s", "uptime_s") for before, after in pairs)
    return [c for c in cores if c is not None]


def progress_binding(progress: dict | None, cores: Sequence[float] = ()) -> Binding | None:
    """What binds training in one progress record (a shard's back-pressure flags at that
    moment; ``cores``: the shards' CPU from the last two records)."""
    if not progress or not progress.get("updates") or not progress.get("shards"):
        return None
    return what_binds(
        inserts_held=float(inserts_held(progress)),
        samples_waited=float(samples_waited(progress)),
        shard_cores=cores,
    )


def training_records(progress: Sequence[dict]) -> list[dict]:
    """The progress records written while the learner trained (updates made, shards known)."""
    return [r for r in progress if r.get("updates") and r.get("shards")]


def run_binding(progress: Sequence[dict]) -> Binding | None:
    """What bound training over a run's progress records: the shares of records in which
    inserts were held and requests waited, and each shard's CPU from the first record of
    training to the last."""
    training = training_records(progress)
    if not training:
        return None
    return what_binds(
        inserts_held=sum(map(inserts_held, training)) / len(training),
        samples_waited=sum(map(samples_waited, training)) / len(training),
        shard_cores=shard_cores(training[0], training[-1]),
    )
