"""The faults ``bench.faults.faults_suite`` injects, by name: the CLI lists them as choices without
importing the suite (which imports torch, apex and the launcher)."""

FAULTS = (
    "kill-actor",
    "kill-shard",
    "kill-learner",
    "stop-shard",
    "corrupt-snapshot",
    "corrupt-checkpoint",
    "full-disk",
    "lose-shard",
    "cut-link",
    "preempt",
)
