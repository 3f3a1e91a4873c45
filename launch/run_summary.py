"""What a local run ends with: its outcome, restarts and faults, as ``summary.json`` holds
them and as the one line ``apex train`` prints last."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from apex.learning.metrics import read_metrics


@dataclass
class RunSummary:
    exit_code: int
    reason: str
    solved: bool
    seconds: float
    outcome: dict = field(default_factory=dict)
    actor_restarts: int = 0
    shard_restarts: int = 0
    learner_restarts: int = 0
    actor_hangs: int = 0
    shards_given_up: int = 0
    actor_processes: int = 0
    ape_x_actors: int = 0
    """Env copies, each an Ape-X actor with its own ε (``apex.algorithms.exploration``)."""
    security: str = "loopback"
    """:func:`security_mode`: curve, insecure or loopback."""
    refused: dict = field(default_factory=dict)
    """Connections the learner and shards refused, by reason (``replay.wire.security``)."""
    items: str = "transitions"
    """What the run's replay items are (``AlgorithmBuilder.items``)."""
    unclean_stops: list = field(default_factory=list)
    """Shards and the learner that did not stop cleanly at the end (a crash or a kill
    while stopping): their final snapshot or checkpoint may be missing."""

    def line(self) -> str:
        updates = self.outcome.get("updates", "?")
        trained = self.outcome.get("transitions_trained", "?")
        solved = f"solved in {self.seconds:.1f} s" if self.solved else "not solved"
        last_eval = self.outcome.get("last_eval_return")
        if last_eval is not None:
            last_eval = f"{last_eval:.1f}"
        else:  # the outcome of a learner that had an evaluator counts what it heard
            last_eval = "none ran" if self.outcome.get("evaluations") == 0 else "none"
        trouble = evaluator_trouble(self.outcome)
        evaluator, hangs = (self.outcome.get(f"evaluator_{k}") for k in ("restarts", "hangs"))
        evaluator = f" | evaluator restarts: {evaluator}" if evaluator else ""
        evaluator += f" ({hangs} hung)" if evaluator and hangs else ""
        evaluator += f" ({trouble})" if trouble else ""
        faults = env_fault_text(self.outcome.get("delivery") or {})
        return (
            f"{solved} | reason: {self.reason} | updates: {updates} | {self.items} trained: "
            f"{trained} | last eval: {last_eval}{evaluator} | actor restarts: "
            f"{self.actor_restarts}{f' ({self.actor_hangs} hung)' if self.actor_hangs else ''}"
            f" | shard restarts: {self.shard_restarts}"
            f"{f' ({self.shards_given_up} given up)' if self.shards_given_up else ''}"
            f" | learner restarts: "
            f"{self.learner_restarts}"
            f"{f' | unclean stops: {len(self.unclean_stops)}' if self.unclean_stops else ''}"
            f"{f' | {faults}' if faults else ''}"
            f" | exit code {self.exit_code}"
        )


def security_mode(security: dict) -> str:
    """How a run's sockets were protected, from its config's ``security`` section:
    ``curve`` (keys), ``insecure`` (beyond loopback without keys, by request) or
    ``loopback`` (no keys; only this machine could reach the roles)."""
    if security.get("keys"):
        return "curve"
    return "insecure" if security.get("insecure") else "loopback"


def last_refused(run_dir: Path) -> dict[str, int]:
    """Refused connections by reason, as the run's newest progress record counted them."""
    progress = [r for r in read_metrics(run_dir) if r.get("event") == "progress"]
    return dict(progress[-1].get("refused") or {}) if progress else {}


def evaluator_trouble(record: dict) -> str | None:
    """What is wrong with the run's evaluator, from a learner's progress or end record (or
    the outcome it announced); None while it is starting or up."""
    state, restarts = record.get("evaluator"), record.get("evaluator_restarts") or 0
    code = record.get("evaluator_last_exit")
    if state == "given up":
        return (
            f"the evaluator gave up after {restarts} restarts (exit code {code}): "
            "see logs/evaluator.log"
        )
    if state == "restarting":
        return f"the evaluator died (exit code {code}), restart {restarts}"
    return None


def env_fault_text(record: dict, named: bool = True) -> str | None:
    """What a user's env cost the run, from a progress record or a delivery account
    (``apex.channels.fault_totals``): the faults, the items dropped with them, each kind
    with its latest line, and the actors stuck in a step now; None when nothing.
    ``named``: begin with "env faults" (a line of its own; not after its name)."""
    parts = []
    if record.get("env_faults"):
        kinds = record.get("env_fault_kinds") or {}
        by_kind = "; ".join(
            f"{kind} {count:,}: {line.removeprefix(f'{kind}: ')}" if line else f"{kind} {count:,}"
            for kind, (count, line) in kinds.items()
        )
        parts.append(
            f"{'env faults ' if named else ''}{record['env_faults']:,} "
            f"({record.get('items_dropped') or 0:,} items dropped"
            f"{f'; {by_kind}' if by_kind else ''})"
        )
    stuck = record.get("actors_stuck") or {}
    if stuck:
        parts.append(
            ", ".join(
                f"actor {index} stuck in an env step for {age} s" for index, age in stuck.items()
            )
        )
    return "; ".join(parts) or None
