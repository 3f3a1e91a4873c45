"""What a local run ends with: its outcome, restarts and faults, as ``summary.json`` holds
them and as the one line ``apex train`` prints last."""

from __future__ import annotations

from dataclasses import dataclass, field

from launch.views.status import env_fault_text, evaluator_trouble


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
    """``launch.views.status.security_mode``: curve, insecure or loopback."""
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
