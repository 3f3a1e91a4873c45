"""Settings of the actor and learner roles: plain frozen dataclasses, free of torch.

They live apart from the roles so that building and validating a run's config (the
supervisor, a shard process, ``apex slurm submit``) never pays torch's second-long import.
Each validates itself (``problems``), naming every bad field with its value; rules that
span roles are ``launch.config.RunConfig``'s. ``actor``: an actor process's; ``learner``:
the learner's; ``widths``: the networks' sizes both check.
"""

from apex.settings.actor import ActorConfig
from apex.settings.learner import LearnerConfig

__all__ = ["ActorConfig", "LearnerConfig"]
