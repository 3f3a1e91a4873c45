"""What a learner makes of the evaluator's results: when the run is solved, when training
settles (``LearnerConfig.settle_return``), which confirmed weights it follows, and when
it goes back to them.

A periodic evaluation at the target asks the evaluator for a confirmation; a confirmed one
(or the periodic one itself, where ``confirm_episodes`` is 0) solves the run and stops its
clock. A run that trains on past its solve settles at the first confirmation at or above
the settle bar: the algorithm's ``solved`` (restart, anchor, averaged policy) and the
solved step size start there. Once settled, an algorithm that follows better
confirmations moves to each one above the best so far; one that goes back to its anchor
(DQN's ``back_to_anchor``) does so at a settled run's periodic evaluation under the
target, once for each stretch of weights published since it last went back.
"""

from __future__ import annotations

import logging

from apex.algorithms.registry import Algorithm
from apex.learning.evaluation import Evaluation
from apex.learning.progress import LearnerCounters
from apex.settings import LearnerConfig
from apex.weights import Publications

logger = logging.getLogger(__name__)


class Solving:
    """One learner's solve state; :meth:`take` each evaluation as it arrives.

    Args:
        config: the learner's settings (``confirm_episodes``, ``settle_return``).
        algorithm: told of each solve it should train on from (``Algorithm.solved``).
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
        self.algorithm = algorithm
        self.weights = weights
        self.target_return = target_return
        self.solved = False  # in this life
        self.best_confirmed: float | None = None  # in this life
        self.last_eval: float | None = None
        self.went_back = 0  # to the anchor, in this life
        self._back_at_version = -1  # the weight version when it last went back

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
            self._back_to_anchor_if_settled(evaluation, counters)
        return solves

    def _back_to_anchor_if_settled(self, evaluation: Evaluation, counters: LearnerCounters) -> None:
        # Evaluations of weights published before the last return say nothing of the
        # weights since: only a newer one sends training back again.
        if counters.settled_at_s is None or evaluation.weight_version <= self._back_at_version:
            return
        if self.algorithm.back_to_anchor():
            self.went_back += 1
            self._back_at_version = counters.weight_version
            logger.info("evaluation %.1f of weights %d is under the target: training "
                        "goes back to its anchor", evaluation.mean,
                        evaluation.weight_version)  # fmt: skip

    def _beats_best_confirmed(self, mean: float) -> bool:
        best = self.best_confirmed
        return self.algorithm.follows_better_confirmations and (best is None or mean > best)

    def _settle_or_follow(
        self, mean: float, version: int, counters: LearnerCounters, elapsed_s: float
    ) -> None:
        bar = self.config.settle_return
        if counters.settled_at_s is None:
            if bar is not None and mean < bar:
                logger.info("confirmed mean %.1f is under %.1f: training goes on unsettled",
                            mean, bar)  # fmt: skip
                return
            counters.settled_at_s = elapsed_s
        confirmed = self.weights.state_of(version)
        if self.algorithm.keeps_confirmed_weights:
            gone = "" if confirmed is not None else ": no longer kept, from the newest"
            logger.info("training goes on with the confirmed weights %d%s", version, gone)
        self.algorithm.solved(confirmed)
