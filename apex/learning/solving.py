"""What a learner makes of the evaluator's results: when the run is solved.

A periodic evaluation at the target asks the evaluator for a confirmation; a confirmed one
(or the periodic one itself, where ``confirm_episodes`` is 0) solves the run. The solve is
timed at the publication of the weights it played: that is when the learner had the
result, and the evaluator's own latency (episodes of a slow simulator, a confirmation of
100 of them) is kept apart as the time the verdict was heard. A run that trains on past
its solve (``stop_when_solved = false``) goes on as before it, and its evaluations say
whether it stays solved.
"""

from __future__ import annotations

from apex.learning.evaluation import Evaluation
from apex.learning.progress import LearnerCounters
from apex.settings import LearnerConfig


class Solving:
    """One learner's solve state; :meth:`take` each evaluation as it arrives.

    Args:
        config: the learner's settings (``confirm_episodes``).
        target_return: the mean that solves the run (None: never).
    """

    def __init__(self, config: LearnerConfig, target_return: float | None) -> None:
        self.config = config
        self.target_return = target_return
        self.solved = False  # in this life
        self.last_eval: float | None = None

    def take(
        self,
        evaluation: Evaluation,
        counters: LearnerCounters,
        elapsed_s: float,
        published_s: float | None = None,
    ) -> bool:
        """Whether ``evaluation`` solves the run; keeps the counters' solve and best
        periodic mean.

        Args:
            evaluation: as it arrived.
            counters: the learner's.
            elapsed_s: training seconds now, when the learner hears it.
            published_s: training seconds when the weights it played were published (None:
                not known, e.g. published in a life before this one: then ``elapsed_s``).
        """
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
                known = published_s is not None and published_s <= elapsed_s
                counters.solved_at_s = published_s if known else elapsed_s
                counters.solve_heard_at_s = elapsed_s
        return solves
