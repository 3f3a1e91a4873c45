"""An actor's envs in groups that take turns: one group's emulators play while the actor's
thread acts on and builds from another's.

An actor steps its k envs as one vector env by default: the forward pass, then the
emulators, then the n-step builder and the frame writer, each waiting for the one before.
An ALE game's emulators play on threads of their own (``apex.envs.vector.AtariStacks``
starts a step with ``send`` and returns), so an actor may split its envs into groups
(``actor.env_groups``): it starts one group's step, and while the emulators play it, it
finishes the other group's (builder, frame writer, episode accounting) and acts on it.
This is ale-py's async mode with the halves fixed, so every env keeps its own n-step
builder lane, ε and frame stream exactly as in one group. Other envs step on the actor's
own thread; for them groups would only take turns, so they keep one.

A copy whose step failed (``apex.envs.guard``: it raised, or gave a non-finite observation
or reward) ends its episode there: the step is marked dropped, so nothing that holds it
is sent (the copy's unfinished n-step windows, sequence or unroll go with it), and the
episode's return is not reported. The actor's tally counts each fault by kind.

Each group is a vector env of its share of the envs with an experience maker of its own
(``apex.acting.experience``: its builders, the values it acted on); the groups share the policy,
the frame writer (the actor's envs numbered across the groups) and what is sent. A group
acts with the weights of the moment it acts, as one group does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from apex.acting.experience import ExperienceMaker
from apex.algorithms.protocols import Acting
from apex.envs.families import EnvShape
from apex.envs.guard import FaultTally
from apex.envs.vector import actor_envs
from apex.settings import ActorConfig

if TYPE_CHECKING:
    from apex.acting.frame_writer import FrameWriter


@dataclass
class GroupStep:
    """What finishing one group's step gave: its experience (None: nothing complete) and
    the episodes that ended in it."""

    experience: dict[str, np.ndarray] | None
    returns: list[float]
    lengths: list[int]


class EnvGroup:
    """A share of an actor's envs that steps as one vector env.

    Args:
        envs: its vector env; one with ``send``/``recv`` plays while the caller goes on.
        maker: its experience maker.
        scales: each of its envs' exploration scale.
        first_env: the actor's index of its first env (seeds, frame streams).
        reward_scale: what the maker's rewards are multiplied by (``actor.reward_scale``);
            the returns reported are the env's own.
        faults: the actor's tally of its copies' faults.
    """

    def __init__(
        self,
        envs,
        maker: ExperienceMaker,
        scales: np.ndarray,
        first_env: int,
        reward_scale: float = 1.0,
        faults: FaultTally | None = None,
    ) -> None:
        self.envs, self.maker, self.scales = envs, maker, scales
        self.first_env = first_env
        self.reward_scale = reward_scale
        self.faults = faults or FaultTally()
        self.steps_dropped = 0
        self.count = len(scales)
        self._plays_alone = hasattr(envs, "send") and hasattr(envs, "recv")
        self._observations: np.ndarray | None = None
        self._actions: np.ndarray | None = None
        self._in_flight = False
        self._returns = np.zeros(self.count)
        self._lengths = np.zeros(self.count, dtype=np.int64)

    def begin(self, seed: int) -> None:
        """Resets the envs, env ``i`` of the actor seeded ``seed + i``."""
        seeds = [seed + self.first_env + env for env in range(self.count)]
        self._observations, info = self.envs.reset(seed=seeds)
        self.faults.take(info)
        self.maker.begin(self._observations)

    def act(self, rng: np.random.Generator) -> None:
        """Chooses the next actions and, where the envs play alone, starts their step."""
        self._actions = self.maker.act(self._observations, self.scales, rng)
        if self._plays_alone:
            self.envs.send(self._actions)
            self._in_flight = True

    def finish(self) -> GroupStep:
        """Completes the step :meth:`act` began: the envs' outcome through the maker."""
        if self._plays_alone:
            following, rewards, terminated, truncated, info = self.envs.recv()
            self._in_flight = False
        else:
            following, rewards, terminated, truncated, info = self.envs.step(self._actions)
        dropped = self.faults.take(info)
        if dropped is not None:
            truncated = truncated | dropped
            self.steps_dropped += int(dropped.sum())
        ended = np.logical_or(terminated, truncated)
        final = following
        if ended.any():
            final = following.copy()
            for env in np.flatnonzero(ended):
                final[env] = info["final_obs"][env]
        out = self.maker.step(
            self._observations,
            self._actions,
            rewards * self.reward_scale,
            following,
            final,
            terminated,
            truncated,
            dropped,
        )
        self._returns += rewards
        self._lengths += 1
        reported = ended if dropped is None else ended & ~dropped
        finished = np.flatnonzero(reported)
        returns = self._returns[finished].tolist()
        lengths = self._lengths[finished].tolist()
        self._returns[ended] = 0.0
        self._lengths[ended] = 0
        self._observations = following
        experience = out if out is not None and len(out["action"]) else None
        return GroupStep(experience, returns, lengths)

    def close(self) -> None:
        """Takes back a step still in play (an emulator pool is not closed mid-step)."""
        if self._in_flight:
            self.envs.recv()
            self._in_flight = False
        self.envs.close()


def make_groups(
    config: ActorConfig,
    shape: EnvShape,
    acting: Acting,
    frames: FrameWriter | None,
    version: Callable[[], int],
    scales: np.ndarray,
    envs: Callable[[str, int], object] | None = None,
    faults: FaultTally | None = None,
) -> list[EnvGroup]:
    """``config.env_groups`` groups of the actor's envs, in order, counting their faults
    in ``faults``.

    ``envs(name, count)`` makes a group's vector env (default: ``actor_envs`` with the
    actor's emulator threads and env stepping)."""
    problems = config.group_problems()
    if problems:
        raise ValueError("; ".join(problems))
    count = config.envs_per_actor // config.env_groups
    share = dataclasses.replace(config, envs_per_actor=count)
    make_envs = envs or (
        lambda name, n: actor_envs(
            name, n, threads=config.env_threads, stepping=config.env_stepping
        )
    )
    groups = []
    for first in range(0, config.envs_per_actor, count):
        builder = acting.experience(share, shape, version, frame_refs=frames is not None)
        maker = ExperienceMaker(share, builder, frames, first_env=first)
        group_scales = scales[first : first + count]
        groups.append(
            EnvGroup(
                make_envs(config.env, count),
                maker,
                group_scales,
                first,
                config.reward_scale,
                faults,
            )
        )
    return groups
