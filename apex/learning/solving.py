"""What a learner makes of the evaluator's results: when the run is solved, when training
settles, and, in a run that trains on past its solve, what it does with the weights the
evaluations confirmed (``LearnerConfig.solved``, for any algorithm).

A periodic evaluation at the target asks the evaluator for a confirmation; a confirmed one
(or the periodic one itself, where ``confirm_episodes`` is 0) solves the run and stops its
clock. A run that trains on past its solve settles at the first confirmation at or above
``solved.settle_return``: from there the solved step size applies, training may restart
from the confirmed weights, and the actors may act with an average of the policy. Once
settled, a confirmation above the best so far (``solved.follow_better``) becomes the
weights training goes back to, and a periodic evaluation under the target sends training
back to them (``solved.back_to_confirmed``), once for each stretch of weights published
since it last went back.

All of it goes through the policy's weights: ``Algorithm.policy``, and
``Algorithm.train_from`` to put weights back into training.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING

from apex.algorithms.protocols import Algorithm
from apex.algorithms.updates import soft_update
from apex.learning.evaluation import Evaluation
from apex.learning.progress import LearnerCounters
from apex.settings import LearnerConfig
from apex.weights import Publications

if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)


class Solving:
    """One learner's solve state; :meth:`take` each evaluation as it arrives.

    Args:
        config: the learner's settings (``confirm_episodes``, ``solved``).
        algorithm: what trains; its policy's weights are what the solve keeps.
        weights: the learner's publications, which keep the confirmed weights.
        target_return: the mean that solves the run (None: never).
    """

    def __init__(
        self,
        config: LearnerConfig,
        algorithm: Algorithm,
        weights: Publications,
        target_return: float | None,
    ) -> None:
        self.config = config
        self.settings = config.solved
        self.algorithm = algorithm
        self.weights = weights
        self.target_return = target_return
        self.solved = False  # in this life
        self.settled = False  # in this life, or taken over from the one before
        self.best_confirmed: float | None = None  # in this life
        self.last_eval: float | None = None
        self.went_back = 0  # to the confirmed weights, in this life
        self._back_at_version = -1  # the weight version when it last went back
        self.confirmed: dict[str, torch.Tensor] | None = None  # what it goes back to
        self.average: nn.Module | None = None
        if self.settings.policy_average and not self.settings.average_from_solve:
            self._start_average()

    @property
    def policy(self) -> nn.Module:
        """What is published to the actors and the evaluator: the policy, or its average."""
        return self.algorithm.policy if self.average is None else self.average

    def after_update(self) -> None:
        """One update trained: the average follows the policy."""
        if self.average is not None:
            soft_update(self.average, self.algorithm.policy, self.settings.policy_average)

    def resume_settled(self) -> None:
        """The run had settled in a life before this one: what waits for the settle is
        in place (the average, and weights to go back to: the checkpoint's, or the
        policy's now)."""
        self.settled = True
        if self.settings.policy_average and self.average is None:
            self._start_average()
        if self.settings.back_to_confirmed and self.confirmed is None:
            self.confirmed = _copy(self.algorithm.policy.state_dict())

    def state_dict(self) -> dict:
        """The average and the confirmed weights, for the checkpoint."""
        state = {}
        if self.average is not None:
            state["average"] = self.average.state_dict()
        if self.confirmed is not None:
            state["confirmed"] = self.confirmed
        return state

    def load_state_dict(self, state: dict) -> None:
        """Takes back :meth:`state_dict`'s (a checkpoint without them: none)."""
        if "average" in state and self.settings.policy_average:
            if self.average is None:
                self._start_average()
            self.average.load_state_dict(state["average"])
        # Checkpoints written before the loop kept them name the weights an anchor.
        confirmed = state.get("confirmed", state.get("anchor"))
        if confirmed is not None:
            self.confirmed = confirmed

    def take(self, evaluation: Evaluation, counters: LearnerCounters, elapsed_s: float) -> bool:
        """Whether ``evaluation`` solves the run; keeps the counters' solve, settling and
        best periodic mean."""
        mean = evaluation.mean
        if not evaluation.confirmation:
            self.last_eval = mean
            best = counters.best_eval_return
            counters.best_eval_return = mean if best is None else max(best, mean)
        reached = self.target_return is not None and mean >= self.target_return
        solves = reached and (evaluation.confirmation or self.config.confirm_episodes == 0)
        if solves and not self.solved:
            self.solved = True
            if counters.solved_at_s is None:  # else solved in a life before this one
                counters.solved_at_s = elapsed_s
            if counters.settled_at_s is None:  # never before the run's first solve
                self.best_confirmed = mean
                self._settle_or_follow(mean, evaluation.weight_version, counters, elapsed_s)
        elif solves and evaluation.confirmation and self._beats_best_confirmed(mean):
            logger.info("confirmed mean %.1f beats %s: training follows weights %d", mean,
                        self.best_confirmed, evaluation.weight_version)  # fmt: skip
            self.best_confirmed = mean
            self._settle_or_follow(mean, evaluation.weight_version, counters, elapsed_s)
        elif not evaluation.confirmation and not reached:
            self._back_if_settled(evaluation, counters)
        return solves

    def _back_if_settled(self, evaluation: Evaluation, counters: LearnerCounters) -> None:
        # Evaluations of weights published before the last return say nothing of the
        # weights since: only a newer one sends training back again.
        if (
            counters.settled_at_s is None
            or not self.settings.back_to_confirmed
            or self.confirmed is None
            or evaluation.weight_version <= self._back_at_version
        ):
            return
        self._train_from(self.confirmed)
        self.went_back += 1
        self._back_at_version = counters.weight_version
        logger.info("evaluation %.1f of weights %d is under the target: training goes back "
                    "to the confirmed weights", evaluation.mean,
                    evaluation.weight_version)  # fmt: skip

    def _beats_best_confirmed(self, mean: float) -> bool:
        best = self.best_confirmed
        return self.settings.confirms_improvements and (best is None or mean > best)

    def _settle_or_follow(
        self, mean: float, version: int, counters: LearnerCounters, elapsed_s: float
    ) -> None:
        bar = self.settings.settle_return
        if counters.settled_at_s is None:
            if bar is not None and mean < bar:
                logger.info("confirmed mean %.1f is under %.1f: training goes on unsettled",
                            mean, bar)  # fmt: skip
                return
            counters.settled_at_s = elapsed_s
        confirmed = self.weights.state_of(version)
        if self.settings.keeps_confirmed_weights:
            gone = "" if confirmed is not None else ": no longer kept, from the newest"
            logger.info("training goes on with the confirmed weights %d%s", version, gone)
        first_settle = not self.settled
        self.settled = True
        if first_settle and confirmed is not None and self.settings.restart:
            self._train_from(confirmed)
        if confirmed is not None:
            self.confirmed = confirmed
        elif self.confirmed is None and self.settings.back_to_confirmed:
            self.confirmed = _copy(self.algorithm.policy.state_dict())
        if self.settings.policy_average and self.average is None:
            self._start_average()

    def _train_from(self, weights: dict[str, torch.Tensor]) -> None:
        self.algorithm.train_from(weights)
        if self.average is not None:
            self.average.load_state_dict(weights)

    def _start_average(self) -> None:
        self.average = copy.deepcopy(self.algorithm.policy)
        self.average.requires_grad_(False)


def _copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in state.items()}
