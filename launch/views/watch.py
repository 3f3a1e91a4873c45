"""A running run seen from its directory, kept up to date as its metrics grow: what the
live view of ``apex train`` and the ``apex top`` dashboard draw.

Rates that the records do not carry (a shard's intake and CPU, the learner's CPU, the
actors' sending) are differences between the last two progress records, so they need
no clock of the viewer's and work the same for a run on other hosts (a Slurm job whose
run directory is on a shared file system).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

from apex.algorithms.registry import replay_items
from apex.learning.metrics import MetricsTail
from launch.run_files import read_config, read_summary
from launch.views.binding import evaluator_behind, progress_binding, rate_between
from launch.views.status import target_return

# Evaluation means kept for the dashboard's curve.
EVALUATIONS_KEPT = 400


class RunWatch:
    """What is known of one run; :meth:`poll` takes in what its metrics gained."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.config = read_config(run_dir)
        self.target = target_return(self.config)
        self.items = replay_items(str(self.config.get("algorithm", "auto")))
        self._tail = MetricsTail(run_dir)
        self.progress: dict | None = None
        self.previous: dict | None = None
        self.evaluations: deque[float] = deque(maxlen=EVALUATIONS_KEPT)
        self.best_eval: float | None = None
        self.evaluated_steps: int | None = None  # the newest evaluation's weights'
        self.learner_starts = 0
        self.start: dict | None = None
        self.end: dict | None = None
        self.waiting: dict | None = None  # the learner's latest, while the shards fill
        self.evaluated_at_s: float | None = None  # training seconds of the newest evaluation

    def poll(self) -> bool:
        """Reads what was appended; True if anything was."""
        records = self._tail.read()
        for record in records:
            event = record.get("event")
            if event == "progress":
                self.previous, self.progress = self.progress, record
            elif event == "evaluation" and record.get("eval_return_mean") is not None:
                mean = record["eval_return_mean"]
                self.evaluations.append(mean)
                self.best_eval = mean if self.best_eval is None else max(self.best_eval, mean)
                self.evaluated_steps = record.get("env_steps")
                self.evaluated_at_s = record.get("time_s")
            elif event == "waiting":
                self.waiting = record
            elif event == "start":
                self.learner_starts += 1
                self.start, self.end = record, None
            elif event == "end":
                self.end = record
        return bool(records)

    @property
    def last_eval(self) -> float | None:
        return self.evaluations[-1] if self.evaluations else None

    def last_eval_age_s(self) -> float | None:
        """Training seconds since the newest evaluation was heard (None: none yet)."""
        now = (self.progress or {}).get("time_s")
        if now is None or self.evaluated_at_s is None:
            return None
        return max(0.0, now - self.evaluated_at_s)

    def time_left_s(self) -> float | None:
        """Until the first limit that will stop the run (time, or updates at the current
        rate); None without a limit."""
        progress, learner = self.progress, self.config.get("learner", {})
        if not progress or self.end is not None:
            return None
        left = []
        if learner.get("max_time_s") is not None:
            left.append(learner["max_time_s"] - progress["time_s"])
        rate = progress.get("updates_per_s")
        if learner.get("max_updates") is not None and rate:
            left.append((learner["max_updates"] - progress["updates"]) / rate)
        return max(min(left), 0.0) if left else None

    def replay_fill(self) -> tuple[int, int | None]:
        """Transitions held by all shards, and their capacity (None if unknown)."""
        progress = self.progress or {}
        size = sum(s for s in progress.get("replay_sizes") or [] if s is not None)
        capacities = [s.get("capacity") for s in progress.get("shards") or []]
        if capacities and None not in capacities:
            return size, sum(capacities)
        replay, shards = self.config.get("replay", {}), self.config.get("shards")
        capacity = replay.get("capacity")
        return size, capacity * shards if capacity and shards else None

    def shard_rows(self) -> list[dict]:
        """Per shard: fill, intake per second, samples per second, back-pressure,
        rejects and CPU cores, from the last two progress records."""
        new = (self.progress or {}).get("shards") or []
        old = (self.previous or {}).get("shards") or []
        rows = []
        for index, shard in enumerate(new):
            before = old[index] if index < len(old) else None
            rows.append(
                {
                    **shard,
                    "index": index,
                    "in_per_s": rate_between(shard, before, "transitions_added", "uptime_s"),
                    "samples_per_s": rate_between(shard, before, "samples_served", "uptime_s"),
                    "cpu_cores": rate_between(shard, before, "cpu_s", "uptime_s"),
                }
            )
        return rows

    def updates(self) -> int:
        """Updates so far: the end record's once the learner ended (it counts the updates
        after the last progress record), else the last progress record's."""
        latest = self.end or self.progress or {}
        return latest.get("updates") or 0

    def binding(self, remedy: bool = True) -> str | None:
        """What holds training back now (``launch.views.binding``), and the evaluator where
        it is behind, with the settings that move them (``remedy``); None while neither
        is clear."""
        shard_cores = [r["cpu_cores"] for r in self.shard_rows() if r["cpu_cores"] is not None]
        found = [progress_binding(self.progress, shard_cores)]
        every = (self.config.get("learner") or {}).get("eval_every_steps")
        steps = (self.progress or {}).get("env_steps")
        found.append(evaluator_behind(steps, self.evaluated_steps, every))
        lines = [b.line() if remedy else f"{b.part} ({b.evidence})" for b in found if b]
        return "; ".join(lines) or None

    def learner_cpu_cores(self) -> float | None:
        return rate_between(self.progress, self.previous, "learner_cpu_s")

    def actors_sent_per_s(self) -> float | None:
        return rate_between(self.progress, self.previous, "actor_transitions_sent")

    def filling(self) -> str:
        """What the learner waits for before its first update, and what the shards refused
        meanwhile (every insert refused: the run cannot start)."""
        waiting = self.waiting or {}
        replay = self.config.get("replay") or {}
        text = "waiting for replay to fill"
        if waiting and isinstance(replay.get("min_size"), int):
            text += f": {waiting['replay_size']:,} of {replay['min_size']:,} {self.items}"
        if waiting.get("rejected_total"):
            text += (
                f"; the shards rejected {waiting['rejected_total']:,} insert messages "
                "(their logs say why)"
            )
        return text

    def state(self) -> str:
        """running, or how it ended (the supervisor's outcome when it wrote one)."""
        if self.end is None:
            return "running" if self.progress else f"starting: {self.filling()}"
        summary = read_summary(self.run_dir)
        reason = (summary or self.end).get("reason", self.end.get("reason"))
        return "solved" if self.end.get("solved") else f"ended: {reason}"
