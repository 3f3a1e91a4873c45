"""Greedy evaluation: episodes played on environments of their own with an acting policy
at zero exploration, and the EVALUATION message that carries their returns to the learner.

An EVALUATION message (``apex.channels.ApexKind.EVALUATION``): the weights version in the
header, the env steps those weights were published at in its scalar, the episodes played
in its count; arrays: the returns (float64, one per episode) and the evaluation's facts
(int64, :data:`FACTS` in order).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from apex.algorithms.protocols import ActingPolicy
from apex.channels import ApexKind
from apex.envs.guard import FaultTally
from replay.errors import ProtocolError
from replay.wire.layout import Message

# An EVALUATION message's second array: its number in the run (from 0), whether it
# confirms the periodic one before it (1) or is periodic (0), and how many cadence points
# passed while the evaluator was busy (evaluated once, with the newest weights), and how
# many of its episodes were played again because an env copy failed in them.
FACTS = ("index", "confirmation", "skipped", "replayed")
# An evaluation whose copies fail in this many episodes per episode it plays gives up.
REPLAYS_PER_EPISODE = 10
# Its sender id: apart from every actor's index and the learner's.
EVALUATOR_SENDER = 2_000_000


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of one set of published weights."""

    weight_version: int
    env_steps: int
    returns: np.ndarray
    index: int
    confirmation: bool
    skipped: int = 0
    replayed: int = 0

    @property
    def mean(self) -> float:
        return float(self.returns.mean())

    def record(
        self,
        time_s: float,
        updates: int,
        weights_updates: int | None,
        solves: bool,
        weights_time_s: float | None = None,
    ) -> dict:
        """The learner's metrics record of it: heard at ``time_s`` of training, after
        ``updates``; ``weights_updates`` and ``weights_time_s``: the updates behind the
        weights evaluated and the training seconds when they were published (None: not
        known)."""
        return {
            "event": "confirmation" if self.confirmation else "evaluation",
            "time_s": time_s,
            "weights_time_s": weights_time_s,
            "updates": updates,
            "weights_updates": weights_updates,
            "weight_version": self.weight_version,
            "env_steps": self.env_steps,
            "index": self.index,
            "skipped": self.skipped,
            "episodes": int(self.returns.size),
            "episodes_replayed": self.replayed,
            "eval_return_mean": self.mean,
            "eval_return_min": float(self.returns.min()),
            "eval_return_max": float(self.returns.max()),
            "solved": solves,
        }

    def to_message(self, sequence: int) -> Message:
        facts = np.array(
            [self.index, int(self.confirmation), self.skipped, self.replayed], dtype=np.int64
        )
        return Message(
            ApexKind.EVALUATION,
            EVALUATOR_SENDER,
            sequence,
            self.weight_version,
            self.returns.size,
            float(self.env_steps),
            (np.asarray(self.returns, dtype=np.float64), facts),
        )


def read_evaluation(message: Message) -> Evaluation:
    """The evaluation an EVALUATION message carries.

    Raises:
        ProtocolError: another kind, or arrays, counts or returns that do not fit.
    """
    if message.kind != ApexKind.EVALUATION:
        raise ProtocolError(f"expected EVALUATION, got {message.kind.name}")
    if len(message.arrays) != 2:
        raise ProtocolError(f"an EVALUATION holds 2 arrays, got {len(message.arrays)}")
    returns, facts = message.arrays
    if returns.dtype != np.float64 or returns.ndim != 1 or returns.size == 0:
        raise ProtocolError(
            f"evaluation returns must be float64 (n,), got {returns.dtype}{returns.shape}"
        )
    if not np.isfinite(returns).all() or returns.size != message.count:
        raise ProtocolError("evaluation returns are not finite or not as many as it says")
    if facts.dtype != np.int64 or facts.shape != (len(FACTS),) or (facts < 0).any():
        raise ProtocolError("malformed evaluation facts")
    if not 0.0 <= message.scalar < 2.0**53 or message.policy_version < 0:
        raise ProtocolError("an evaluation's env steps and weights version must be counts")
    index, confirmation, skipped, replayed = facts.tolist()
    if confirmation > 1:
        raise ProtocolError(f"confirmation flag {confirmation}")
    return Evaluation(
        message.policy_version,
        int(message.scalar),
        returns.copy(),
        index,
        bool(confirmation),
        skipped,
        replayed,
    )


def play_greedy(
    policy: ActingPolicy,
    envs: gym.vector.VectorEnv,
    seed: int,
    epsilon: float = 0.0,
    faults: FaultTally | None = None,
) -> np.ndarray:
    """Returns of one greedy episode on each copy of ``envs`` (``apex.envs.vector.evaluation_envs``,
    reset here with ``seed``), played side by side with unclipped rewards: the policy
    acts at zero exploration (ε 0, noise σ 0). ``epsilon``: with ``Discrete`` actions, each
    step's action is a uniformly random one with this probability instead (the Nature
    DQN's evaluation protocol plays Atari at 0.05); ignored for ``Box`` actions.

    An episode in which its copy failed (``apex.envs.guard``) is played again on that
    copy, made anew, and counted in ``faults`` (``faults.replayed``).

    Raises:
        EvaluationFailed: copies failed in :data:`REPLAYS_PER_EPISODE` episodes for each
            episode asked for."""
    faults = faults if faults is not None else FaultTally()
    episodes = envs.num_envs
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    greedy = np.zeros(episodes)
    rng = np.random.default_rng(seed)
    space = envs.single_action_space
    choices = int(space.n) if epsilon and isinstance(space, gym.spaces.Discrete) else 0
    state = policy.initial_state(episodes)
    observations, info = envs.reset(seed=seed)
    faults.take(info)
    policy.begin_episodes(state, np.arange(episodes))
    replaying = np.zeros(episodes, dtype=bool)  # faulted: the next step resets them
    while running.any():
        actions = policy.explore(observations, greedy, rng, state)
        if choices:
            random = rng.random(episodes) < epsilon
            actions = np.where(random, rng.integers(choices, size=episodes), actions)
        observations, rewards, terminated, truncated, info = envs.step(actions)
        if replaying.any():  # reset in this step: their episodes start again
            policy.begin_episodes(state, np.flatnonzero(replaying))
            replaying[:] = False
        faulted = faults.take(info)
        if faulted is not None:
            replaying = faulted & running
            returns[replaying] = 0.0
            faults.replayed += int(replaying.sum())
            if faults.replayed > REPLAYS_PER_EPISODE * episodes:
                raise EvaluationFailed(
                    f"env copies failed in {faults.replayed} episodes "
                    f"of an evaluation of {episodes}; the latest: "
                    f"{faults.latest}"
                )
            terminated, truncated = terminated & ~replaying, truncated & ~replaying
        returns += rewards * running
        ended = np.logical_or(terminated, truncated)
        running &= ~ended
        if ended.any():  # a copy's next episode, played on but not counted
            policy.begin_episodes(state, np.flatnonzero(ended))
    return returns


class EvaluationFailed(RuntimeError):
    """An evaluation's env copies failed in too many episodes to give its returns."""
