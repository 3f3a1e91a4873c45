"""The run config's ``[slurm]`` section: what ``apex slurm submit`` asks Slurm for, and the
rules that keep a job's layout possible (only that command reads it)."""

from __future__ import annotations

from dataclasses import dataclass

from replay.store.field_checks import checked, named, not_positive_integers


@dataclass(frozen=True)
class SlurmConfig:
    """How ``apex slurm submit`` lays a run out on a cluster.

    Attributes:
        layout: ``hetjob`` (one component per role; only the learner asks for GPUs) or
            ``multi-prog`` (one homogeneous allocation, roles picked by task rank).
        partition, account: passed to sbatch when set.
        time: the job's time limit (sbatch ``--time``).
        learner_gpus: GPUs for the learner's component (its ``auto`` device then finds CUDA).
        learner_cpus, cpus_per_actor, cpus_per_shard: CPUs per task.
        actor_nodes: nodes the actors spread over (actors must divide evenly); in the
            multi-prog layout, the nodes of the whole allocation.
        shard_nodes: nodes the shards spread over (shards must divide evenly).
        signal_before_end_s: seconds before the time limit at which Slurm signals the job
            so the learner checkpoints and the job requeues itself.
        requeue: requeue on that signal (else just checkpoint and end).
        weights_port, episodes_port: the learner's ports on its node.
        shard_port_base: shard ``k`` on a node (k = 0, 1, ...) binds ``base + 2k`` for
            inserts and ``base + 2k + 1`` for requests.
        learner_options, shard_options, actor_options: extra ``#SBATCH`` options per
            component (e.g. ``--nodelist=...``, ``--constraint=...``).
        setup: shell lines run before any role starts (``module load``, ``source venv``).
        python: interpreter that runs ``apex`` on the nodes (None: ``python3`` from their
            ``PATH`` after ``setup``; ``launch.slurm.node_setup``).
        pythonpath: folders, as the nodes see them, put first on the roles' ``PYTHONPATH``:
            where the user's own modules (an env factory, a network) are imported from.
    """

    layout: str = "hetjob"
    partition: str | None = None
    account: str | None = None
    time: str = "01:00:00"
    learner_gpus: int = 0
    learner_cpus: int = 2
    cpus_per_actor: int = 1
    cpus_per_shard: int = 1
    actor_nodes: int = 1
    shard_nodes: int = 1
    signal_before_end_s: int = 120
    requeue: bool = True
    weights_port: int = 5550
    episodes_port: int = 5551
    shard_port_base: int = 5600
    learner_options: tuple[str, ...] = ()
    shard_options: tuple[str, ...] = ()
    actor_options: tuple[str, ...] = ()
    setup: str = ""
    python: str | None = None
    pythonpath: tuple[str, ...] = ()

    def problems(self, actors: object, shards: object, prefix: str = "slurm.") -> list[str]:
        """Every problem with this layout for a run of ``actors`` and ``shards``."""
        return checked(self, prefix, lambda: self._range_problems(actors, shards, prefix))

    def _range_problems(self, actors: object, shards: object, prefix: str) -> list[str]:
        problems = []
        if self.layout not in ("hetjob", "multi-prog"):
            problems.append(f"{prefix}layout must be hetjob or multi-prog, got {self.layout!r}")
        counts = (
            "actor_nodes",
            "shard_nodes",
            "learner_cpus",
            "cpus_per_actor",
            "cpus_per_shard",
        )
        bad_counts = not_positive_integers(named(self, prefix, counts))
        problems += bad_counts
        if not isinstance(self.learner_gpus, int) or self.learner_gpus < 0:
            problems.append(f"{prefix}learner_gpus must be >= 0, got {self.learner_gpus!r}")
        if not isinstance(self.signal_before_end_s, int) or self.signal_before_end_s < 0:
            problems.append(
                f"{prefix}signal_before_end_s must be >= 0 seconds, "
                f"got {self.signal_before_end_s!r}"
            )
        for name in ("weights_port", "episodes_port", "shard_port_base"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1024 <= value <= 65535:
                problems.append(f"{prefix}{name} must be a port in 1024..65535, got {value!r}")
        for folder in self.pythonpath:
            if not isinstance(folder, str) or not folder or ":" in folder:
                problems.append(
                    f"{prefix}pythonpath holds folders, each a path without ':', got {folder!r}"
                )
        if self.layout == "multi-prog" or bad_counts:
            return problems  # multi-prog: one allocation, tasks fill its nodes in rank order
        if isinstance(actors, int) and actors % self.actor_nodes:
            problems.append(
                f"actors {actors} do not divide over {prefix}actor_nodes {self.actor_nodes}"
            )
        if isinstance(shards, int) and shards % self.shard_nodes:
            problems.append(
                f"shards {shards} do not divide over {prefix}shard_nodes {self.shard_nodes}"
            )
        return problems
