"""The learner's progress records: what accumulates between two of them, and the record.

A record (``event: progress`` in ``metrics.jsonl``) joins the learner's own window (updates,
loss, |TD|, episode returns and policy lags reported by the actors) with what the sampler
knows of every shard (its latest INFO counters), so writing one costs no round trip.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

# Episodes and lags the window keeps for its means and percentiles.
RETURNS_KEPT = 100
LAGS_KEPT = 1000


@dataclass
class LearnerCounters:
    """What a learner has done over the whole run (kept in checkpoints)."""

    updates: int = 0
    weight_version: int = 0
    transitions_trained: int = 0
    train_seconds: float = 0.0
    episodes_seen: int = 0
    best_eval_return: float | None = None
    # Training seconds at the publication of the weights that the confirmed solve played
    # (the learner's time to the result), and when that confirmation reached the learner
    # (the first plus the evaluator's latency, which more actors do not shorten).
    solved_at_s: float | None = None
    solve_heard_at_s: float | None = None
    # Updates whose loss or gradient was not finite: skipped, nothing changed or published.
    updates_skipped: int = 0
    evaluations: int = 0  # periodic ones heard, confirmations aside


@dataclass
class ProgressWindow:
    """What the learner accumulates between two progress records."""

    updates: int = 0
    loss: float = 0.0
    td: float = 0.0
    returns: deque[float] = field(default_factory=lambda: deque(maxlen=RETURNS_KEPT))
    lags: deque[int] = field(default_factory=lambda: deque(maxlen=LAGS_KEPT))
    # Of the items trained on that carry the version they were made with (IMPALA's
    # unrolls): the learner's version then, less theirs.
    trained_lags: deque[int] = field(default_factory=lambda: deque(maxlen=LAGS_KEPT))
    # Each shard's transitions_added at the last record (None: not known then).
    previous_added: list[int | None] | None = None
    # An algorithm's own figures (``StepResult.extras``): their sums, and how many.
    extras: dict[str, list[float]] = field(default_factory=dict)

    def add_update(self, loss: float, mean_abs_td: float, extras=None) -> None:
        self.updates += 1
        self.loss += loss
        self.td += mean_abs_td
        for name, value in (extras or {}).items():
            total = self.extras.setdefault(name, [0.0, 0])
            total[0] += value
            total[1] += 1

    def add_trained(self, lags: np.ndarray) -> None:
        self.trained_lags.extend(lags.tolist())

    def add_episode(self, episode_return: float, lag: int | None) -> None:
        self.returns.append(episode_return)
        if lag is not None:
            self.lags.append(lag)

    def record(
        self,
        counters: LearnerCounters,
        shard_states: list[dict],
        batch_size: int,
        elapsed_s: float,
        interval_s: float,
        refused: dict[str, int] | None = None,
    ) -> dict:
        """The progress record for the window that ends now; starts a new window.

        ``refused``: connections the learner's own sockets refused, by reason; the
        record's ``refused`` adds the shards' (``replay.wire.security``)."""
        infos = [state.get("info") for state in shard_states]
        refused_total = dict(refused or {})
        for info in infos:
            for reason, count in ((info or {}).get("refused") or {}).items():
                refused_total[reason] = refused_total.get(reason, 0) + count
        added = sum(i["transitions_added"] for i in infos if i)
        updates = self.updates
        lags = self.lags
        record = {
            "event": "progress",
            "time_s": elapsed_s,
            "updates": counters.updates,
            "weight_version": counters.weight_version,
            "updates_per_s": updates / interval_s,
            "samples_per_s": updates * batch_size / interval_s,
            "transitions_per_s": _intake(infos, self.previous_added, interval_s),
            "transitions_added": added,
            "replay_sizes": [i["size"] if i else None for i in infos],
            "dropped_stale_updates": sum(i["dropped_stale_updates"] for i in infos if i),
            "updates_skipped_nonfinite": counters.updates_skipped,
            "priority_updates_applied": sum(i["updates_applied"] for i in infos if i),
            "actor_policy_versions": sorted(
                {
                    s["policy_version_max"]
                    for i in infos
                    if i
                    for s in i["senders"].values()
                    if s["policy_version_max"] is not None
                }
            ),
            "loss": self.loss / updates if updates else None,
            "mean_abs_td": self.td / updates if updates else None,
            "episodes": counters.episodes_seen,
            "episode_return_mean": statistics.fmean(self.returns) if self.returns else None,
            **_lag_figures("policy_lag", lags),
            **_lag_figures("trained_lag", self.trained_lags),
            "shards_alive": sum(1 for s in shard_states if s["alive"]),
            "shards": [_shard_brief(s) for s in shard_states],
            "learner_cpu_s": time.process_time(),
            "refused": refused_total,
            **{name: total / count for name, (total, count) in self.extras.items()},
        }
        self.updates, self.loss, self.td = 0, 0.0, 0.0
        self.extras = {}
        self.trained_lags.clear()
        self.previous_added = [i["transitions_added"] if i else None for i in infos]
        return record


def _intake(infos: list, previous: list | None, interval_s: float) -> float | None:
    """Transitions the shards took per second since the last record (None: the first).
    A shard restored from a snapshot counts from the snapshot's number, below what it had
    said: its intake since is unknown until the next record, never negative."""
    if previous is None:
        return None
    taken = 0
    for index, info in enumerate(infos):
        before = previous[index] if index < len(previous) else None
        if info and before is not None:
            taken += max(0, info["transitions_added"] - before)
    return taken / interval_s


def _lag_figures(name: str, lags) -> dict:
    """Median, 90th percentile and largest of ``lags`` (None each when there are none)."""
    if not lags:
        return {f"{name}_median": None, f"{name}_p90": None, f"{name}_max": None}
    return {
        f"{name}_median": float(np.median(lags)),
        f"{name}_p90": float(np.percentile(lags, 90)),
        f"{name}_max": max(lags),
    }


# What a progress record keeps of each shard's INFO, for apex top: fill, intake,
# back-pressure (the rate limiter holding inserts or samples), rejects and CPU.
SHARD_BRIEF = (
    "size",
    "capacity",
    "transitions_added",
    "samples_served",
    "rejected_total",
    "inserts_waiting",
    "samples_waiting",
    "rate_limiter_diff",
    "refused",
    "cpu_s",
    "uptime_s",
)


def waiting_record(shard_states: list[dict], elapsed_s: float) -> dict:
    """What the learner writes while the shards fill, before its first update: each
    shard's brief (its size and what it rejected among them), so that a run whose every
    insert is refused says so rather than only waiting."""
    shards = [_shard_brief(s) for s in shard_states]
    return {
        "event": "waiting",
        "time_s": elapsed_s,
        "replay_size": sum(s["size"] or 0 for s in shards),
        "rejected_total": sum(s["rejected_total"] or 0 for s in shards),
        "shards_alive": sum(1 for s in shard_states if s["alive"]),
        "shards": shards,
    }


def _shard_brief(state: dict) -> dict:
    info = state.get("info") or {}
    return {"alive": bool(state["alive"]), **{key: info.get(key) for key in SHARD_BRIEF}}


def describe(record: dict, items: str = "transitions") -> str:
    """One log line for a progress record; ``items``: what its replay items are called
    (``AlgorithmBuilder.items``)."""
    per_s = record["transitions_per_s"]
    mean = record["episode_return_mean"]
    return (
        f"update {record['updates']} | {record['updates_per_s']:.0f} updates/s | "
        f"{'?' if per_s is None else f'{per_s:.0f}'} {items}/s | "
        f"return {'?' if mean is None else f'{mean:.1f}'} | "
        f"lag p50 {record['policy_lag_median']}"
    )
