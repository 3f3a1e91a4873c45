"""The statistics of a learning benchmark across seeds, as Agarwal et al. (2021, "Deep RL at
the Edge of the Statistical Precipice", the ``rliable`` package) define them, in numpy:

- the interquartile mean (IQM): the mean of the middle half of the runs, pooled over tasks
  (``scipy.stats.trim_mean(x, 0.25)``: ``floor(n/4)`` runs cut from each end);
- stratified-bootstrap percentile confidence intervals: each resample draws every task's
  runs with replacement from that task alone, so a task keeps its weight;
- the probability of improvement ``P(X > Y)``: per task, the share of run pairs in which
  X beats Y (a tie counts half, as in the Mann-Whitney U statistic), averaged over tasks.

Times to a confirmed solve are censored: an unsolved run only says "at least the budget".
:func:`censored_iqm` scores it at the budget and says whether such a run sits inside the
middle half, where it makes the IQM a lower bound rather than an estimate.

Lower is better for times, higher for returns: the functions take ``higher_is_better``
where it matters and never guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

Scores = Mapping[str, Sequence[float]]
"""Per task, one score per run (seed)."""


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """The mean of the middle half: ``floor(n/4)`` values cut from each end.

    Raises:
        ValueError: no values, or one that is not finite.
    """
    array = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if array.size == 0 or not np.isfinite(array).all():
        raise ValueError(f"an IQM needs finite values, got {array.tolist()}")
    cut = array.size // 4
    return float(array[cut : array.size - cut].mean())


def pooled_iqm(scores: Scores) -> float:
    """The IQM of every run of every task together (rliable's aggregate IQM)."""
    return iqm(np.concatenate([np.asarray(runs, dtype=np.float64) for runs in scores.values()]))


def censored_iqm(times: Sequence[float], solved: Sequence[bool], budget: float) -> dict:
    """The IQM of times to solve, an unsolved run scored at ``budget``.

    Returns ``{"iqm", "unsolved", "lower_bound"}``: ``lower_bound`` is True when an
    unsolved run falls in the middle half, so the true IQM may be higher.
    """
    if len(times) != len(solved):
        raise ValueError(f"{len(times)} times but {len(solved)} solved flags")
    scored = np.array(
        [t if ok else max(t, budget) for t, ok in zip(times, solved, strict=True)], dtype=np.float64
    )
    order = np.argsort(scored, kind="stable")
    cut = scored.size // 4
    middle = order[cut : scored.size - cut]
    return {
        "iqm": iqm(scored),
        "unsolved": int(np.sum(~np.asarray(solved, dtype=bool))),
        "lower_bound": bool(np.any(~np.asarray(solved, dtype=bool)[middle])),
    }


def stratified_bootstrap_ci(
    scores: Scores,
    statistic: Callable[[Scores], float] = pooled_iqm,
    confidence: float = 0.95,
    reps: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(point, low, high)``: ``statistic`` of ``scores``, and its percentile interval
    over ``reps`` resamples that draw each task's runs from that task alone.

    Raises:
        ValueError: a task without runs, or a confidence outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    arrays = {task: np.asarray(runs, dtype=np.float64) for task, runs in scores.items()}
    if not arrays or any(array.size == 0 for array in arrays.values()):
        raise ValueError("every task needs at least one run")
    rng = np.random.default_rng(seed)
    estimates = np.empty(reps)
    for rep in range(reps):
        resample = {
            task: array[rng.integers(0, array.size, array.size)] for task, array in arrays.items()
        }
        estimates[rep] = statistic(resample)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(estimates, [tail, 1.0 - tail])
    return statistic(arrays), float(low), float(high)


def probability_of_improvement(x: Scores, y: Scores, higher_is_better: bool) -> float:
    """``P(X better than Y)``: per task, the share of (run of X, run of Y) pairs in which X's
    is better, a tie counting half; the mean over the tasks both have.

    Raises:
        ValueError: no task in common, or a task without runs.
    """
    tasks = sorted(set(x) & set(y))
    if not tasks:
        raise ValueError("the two score sets share no task")
    shares = []
    for task in tasks:
        a, b = np.asarray(x[task], dtype=np.float64), np.asarray(y[task], dtype=np.float64)
        if a.size == 0 or b.size == 0:
            raise ValueError(f"task {task!r} has no runs on one side")
        if not higher_is_better:
            a, b = -a, -b
        better = (a[:, None] > b[None, :]).mean()
        ties = (a[:, None] == b[None, :]).mean()
        shares.append(better + 0.5 * ties)
    return float(np.mean(shares))


def wholly_worse(
    new: tuple[float, float], old: tuple[float, float], higher_is_better: bool
) -> bool:
    """Whether the interval ``new = (low, high)`` lies entirely on the worse side of
    ``old``: the benchmark's test for a learning regression (overlap is not one)."""
    if higher_is_better:
        return new[1] < old[0]
    return new[0] > old[1]
