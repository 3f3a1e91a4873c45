"""What a run directory says about its run, local or Slurm: ``apex status`` and ``apex slurm
status`` print it, ``apex top`` and the live view of ``apex train`` redraw it.

Everything comes from files every kind of run writes (``config.json``, ``metrics.jsonl``,
``checkpoints/``) and, for a local run, the supervisor's ``summary.json``, so the same
reading serves a run that is going on, one that ended, and one whose job was killed. A
summary keeps every earlier life of a resumed run in its ``history``: a resume adds to
the record and never replaces it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from apex.algorithms.registry import actors_noun
from apex.learning.metrics import read_metrics
from launch.run_files import (
    CHECKPOINTS_DIR,
    CURVES_FILE,
    LOGS_DIR,
    METRICS_FILE,
    SUMMARY_FILE,
    read_config,
    read_summary,
)
from launch.run_summary import env_fault_text, evaluator_trouble, security_mode
from launch.views.binding import run_binding

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRecords:
    """A run's metrics, split by event, and its config."""

    config: dict
    progress: list[dict]
    evaluations: list[dict]
    starts: list[dict]
    ends: list[dict]
    confirmations: list[dict]
    waiting: list[dict]

    @classmethod
    def read(cls, run_dir: Path) -> RunRecords:
        records = read_metrics(run_dir)
        config = read_config(run_dir)

        def of(event: str) -> list[dict]:
            return [r for r in records if r.get("event") == event]

        return cls(
            config,
            of("progress"),
            of("evaluation"),
            of("start"),
            of("end"),
            of("confirmation"),
            of("waiting"),
        )

    @property
    def target_return(self) -> float | None:
        return target_return(self.config)

    @property
    def timeline(self) -> list[dict]:
        """The progress records, then the last end record if it is newer (it holds the
        run's last updates, training time and transitions; a progress record can be up to
        ``metrics_interval_s`` older), its ``train_seconds`` as ``time_s``. A resumed
        run's end records of earlier lives are older than its later progress, and are
        left out."""
        timeline = list(self.progress)
        end = self.ends[-1] if self.ends else None
        ended = end.get("train_seconds") if end else None
        newest = timeline[-1].get("time_s") if timeline else None
        if ended is not None and (newest is None or ended >= newest):
            timeline.append({**end, "time_s": ended})
        return timeline


def env_name(config: dict) -> str:
    """The run's env as ``--env`` names it: config.json holds an ``[env]`` table where the
    run gave its env arguments, a factory or a stack."""
    env = config.get("env", "?")
    return str(env.get("id", "?")) if isinstance(env, dict) else str(env)


def target_return(config: dict) -> float | None:
    """The evaluation mean that counts as solved: the config's, else its env preset's (the
    run's own ``[preset]``, where it has one)."""
    target = config.get("learner", {}).get("target_return")
    if "env" not in config:
        return target
    own = config.get("preset")
    if target is None and isinstance(own, dict):
        from apex.envs.presets import preset_of_file
        from replay.errors import ConfigError

        try:
            return preset_of_file(own, env_name(config), "config.json").solved_return
        except ConfigError:
            return None
    from apex.envs.families import solved_return

    return solved_return(env_name(config), target)


def run_status(run_dir: Path) -> dict:
    """Everything known of a run from its directory: outcome (and earlier ones), updates,
    training time, evaluations against the target, restarts, faults, newest checkpoint."""
    from apex.learning import checkpoint
    from apex.learning.delivery import describe

    run = RunRecords.read(run_dir)
    config = run.config
    status: dict = {
        "run_dir": str(run_dir),
        "env": env_name(config) if "env" in config else None,
        "shards": config.get("shards"),
        "target_return": run.target_return,
        "learner_starts": len(run.starts),
        "security": security_mode(config.get("security") or {}),
        "algorithm": config.get("algorithm"),
    }
    if run.starts:
        start = run.starts[-1]
        status["actors"] = {k: start.get(k) for k in ("actor_processes", "ape_x_actors")}
        status["device"] = start.get("device")
    if run.progress:
        last = run.progress[-1]
        status["progress"] = {
            key: last.get(key)
            for key in (
                "time_s",
                "updates",
                "updates_per_s",
                "transitions_per_s",
                "transitions_added",
                "replay_sizes",
                "episode_return_mean",
                "policy_lag_median",
                "shards_alive",
                "trained_lag_median",
                "trained_lag_p90",
            )
        }
        final = run.timeline[-1]
        if final.get("event") == "end":  # the run's end: its totals, the last window's rates
            status["progress"].update({key: final[key] for key in ("time_s", "updates")})
            if final.get("transitions_added") is not None:
                status["progress"]["transitions_added"] = final["transitions_added"]
        status["refused"] = last.get("refused") or {}
        binding = run_binding(run.progress)
        status["bound_by"] = binding.line() if binding else None
    if run.evaluations:
        means = [e["eval_return_mean"] for e in run.evaluations]
        status["evaluations"] = len(means)
        status["last_eval_return"], status["best_eval_return"] = means[-1], max(means)
    solves = [c for c in run.confirmations if c.get("solved")]
    if solves:
        status["confirmed"] = {
            k: solves[0].get(k)
            for k in ("eval_return_mean", "episodes", "env_steps", "time_s", "weights_time_s")
        }
    newest = checkpoint.latest(run_dir / CHECKPOINTS_DIR)
    status["checkpoint"] = str(newest) if newest else None
    faults: dict = {}
    if run.ends:
        end = run.ends[-1]
        status["ended"] = {k: end.get(k) for k in ("reason", "solved", "updates", "train_seconds")}
        faults = {
            k: end[k]
            for k in ("checkpoints_failed", "metrics_dropped", "updates_skipped_nonfinite")
            if end.get(k)
        }
        if end.get("delivery"):
            status["delivery"] = describe(end["delivery"])
            if text := env_fault_text(end["delivery"], named=False):
                faults["env_faults"] = text
    elif run.progress:  # still running
        if run.progress[-1].get("updates_skipped_nonfinite"):
            faults["updates_skipped_nonfinite"] = run.progress[-1]["updates_skipped_nonfinite"]
        if text := env_fault_text(run.progress[-1], named=False):
            faults["env_faults"] = text
    latest = run.ends[-1] if run.ends else run.progress[-1] if run.progress else {}
    # What the shards rejected, as their latest brief counts it (before training too).
    brief = (run.progress or run.waiting or [{}])[-1]
    rejected = sum(s.get("rejected_total") or 0 for s in brief.get("shards") or [])
    if rejected:
        faults["insert_messages_rejected"] = rejected
    for key in ("evaluator_restarts", "evaluator_hangs"):
        if latest.get(key):
            faults[key] = latest[key]
    status["evaluator_trouble"] = evaluator_trouble(latest)
    if latest.get("evaluator") == "given up":
        faults["evaluator"] = "gave up"
    status["never_evaluated"] = (
        bool(run.ends)
        and not run.evaluations
        and bool((config.get("learner") or {}).get("eval_every_steps"))
    )
    summary = read_summary(run_dir)
    if summary is not None:
        status["outcome"] = {
            k: summary.get(k) for k in ("reason", "solved", "seconds", "exit_code")
        }
        status["restarts"] = {
            role: summary.get(f"{role}_restarts", 0) for role in ("actor", "shard", "learner")
        }
        if summary.get("shards_given_up"):
            faults["shards_given_up"] = summary["shards_given_up"]
        status["history"] = [
            {k: life.get(k) for k in ("reason", "solved", "seconds")}
            for life in summary.get("history", [])
        ]
    elif len(run.starts) > 1:  # a Slurm run: every learner life writes a start record
        status["restarts"] = {"learner": len(run.starts) - 1}
    status["faults"] = faults
    return status


def _number(value, digits: int = 1) -> str:
    """``value`` to ``digits`` decimals; a small one those digits would change (a target of
    -0.45) to three significant ones."""
    if value is None:
        return "?"
    text = f"{value:,.{digits}f}"
    if abs(value) < 10 and float(text) != value:
        return f"{value:.3g}"
    return text


def status_lines(status: dict) -> list[str]:
    """``status`` for a person: a headline, then one line per subject."""
    lines = []
    outcome, ended = status.get("outcome"), status.get("ended")
    if outcome:
        state = "solved" if outcome["solved"] else f"ended: {outcome['reason']}"
        state += f" after {_number(outcome['seconds'])} s (exit code {outcome['exit_code']})"
    elif ended:
        state = "solved" if ended["solved"] else f"ended: {ended['reason']}"
        state += f" after {ended['updates']} updates"
    else:
        state = "running, or stopped without an outcome"
    lines.append(f"run {status['run_dir']} ({status.get('env') or 'unknown env'}): {state}")
    for life in status.get("history", []):
        lines.append(
            f"  earlier life: {'solved' if life['solved'] else life['reason']} "
            f"after {_number(life['seconds'])} s"
        )
    actors = status.get("actors")
    if actors:
        lines.append(
            f"  roles: {status.get('shards')} shard(s), learner on {status.get('device')}, "
            f"{actors['actor_processes']} actor processes = {actors['ape_x_actors']} "
            + (
                "actors (env copies)"
                if actors_noun(str(status.get("algorithm"))) == "actors"
                else "Ape-X actors (env copies, each its own ε)"
            )
        )
    progress = status.get("progress")
    if progress:
        lines.append(
            f"  updates {progress['updates']:,} in {_number(progress['time_s'], 0)} s "
            f"({_number(progress['updates_per_s'], 0)}/s), transitions "
            f"{progress['transitions_added'] or 0:,} in "
            f"({_number(progress['transitions_per_s'], 0)}/s), replay {progress['replay_sizes']}, "
            "policy lag p50 "
            f"{progress['policy_lag_median']}, shards alive {progress['shards_alive']}"
        )
        if progress.get("trained_lag_median") is not None:  # items that carry a version
            lag, p90 = progress["trained_lag_median"], progress["trained_lag_p90"]
            lines.append(f"  policy lag of what was trained on: p50 {lag}, p90 {p90}")
        lines.append(
            f"  episode return (mean of the last 100): {_number(progress['episode_return_mean'])}"
        )
        if status.get("bound_by"):
            lines.append(f"  bound by {status['bound_by']}")
    else:
        lines.append("  no progress recorded yet")
    target = status.get("target_return")
    target_text = f" (target {_number(target)})" if target is not None else " (no target)"
    if "last_eval_return" in status:
        lines.append(
            f"  evaluation: last {_number(status['last_eval_return'])}, best "
            f"{_number(status['best_eval_return'])} over {status['evaluations']}{target_text}"
        )
    elif status.get("never_evaluated"):
        why = status.get("evaluator_trouble") or "the run ended before the first was due"
        lines.append(f"  evaluation: none ran{target_text}: {why}")
    else:
        trouble = status.get("evaluator_trouble")
        lines.append(f"  evaluation: none yet{target_text}{f': {trouble}' if trouble else ''}")
    if "confirmed" in status:
        confirmed = status["confirmed"]
        # The result is the learner's at the weights' publication; the verdict's arrival
        # adds the evaluator's latency (runs before the publication time was kept: only it).
        published = confirmed.get("weights_time_s")
        when = (
            f"weights published at {_number(published)} s of training, confirmed at "
            f"{_number(confirmed['time_s'])} s"
            if published is not None
            else f"{_number(confirmed['time_s'])} s of training"
        )
        lines.append(
            f"  solved: confirmed at {_number(confirmed['eval_return_mean'])} over "
            f"{confirmed['episodes']} episodes, {confirmed['env_steps']:,} env steps, "
            f"{when}"
        )
    restarts = status.get("restarts") or {}
    lines.append("  restarts: " + (", ".join(f"{r} {n}" for r, n in restarts.items()) or "none"))
    faults = status.get("faults") or {}
    lines.append("  faults: " + (", ".join(f"{k} {v}" for k, v in faults.items()) or "none"))
    if "delivery" in status:
        lines.append(f"  delivery: {status['delivery']}")
    refused = {k: n for k, n in (status.get("refused") or {}).items() if n}
    lines.append(
        f"  security: {status.get('security', '?')}; refused connections: "
        + (", ".join(f"{reason} {n:,}" for reason, n in refused.items()) or "none")
    )
    lines.append(f"  checkpoint: {status['checkpoint'] or 'none yet'}")
    return lines


def run_dir_contents(run_dir: Path) -> str:
    """The end line's list of what a run left, with the commands that read it."""
    names = [
        name
        for name in (SUMMARY_FILE, METRICS_FILE, CURVES_FILE, CHECKPOINTS_DIR, LOGS_DIR)
        if (run_dir / name).exists()
    ]
    return (
        f"results in {run_dir}/: {', '.join(names)}; "
        f"read them with: apex status {run_dir}  |  apex plot {run_dir}"
    )
