"""One env copy that may fail: a user's simulator that raises now and then, or returns a
non-finite observation or reward, costs the episode it happened in, not the actor.

:class:`GuardedCopy` wraps each copy an actor or the evaluator steps (every family but the
ALE's C++ emulators, ``apex.envs.vector``), in whichever thread or process steps it:

- a ``step`` that raises: the copy is closed and made again from its factory, and the
  step comes back *truncated*, with the last good observation and a reward of 0, and the
  cause in its info under :data:`STEP_FAULT` (``"RuntimeError: the line it raised"``);
- a ``step`` whose observation or reward is not finite: the same, without a new copy (the
  copy is sound, its episode is not); checked for float observations only;
- a ``reset`` that raises or gives a non-finite observation: tried again on a new copy;
  the causes it got past go in the reset's info under :data:`RESET_FAULTS`, a line each.

A copy stepped in the caller's process (serially or on threads) also says what it is in
(:data:`IN_STEP`), so an actor's watchdog can name the copy that hangs.

What a faulted step's truncation gives is not a transition: the actor drops it and every
unfinished n-step window, sequence or unroll of that copy that holds it
(``apex.acting.env_group``), and the evaluator plays that episode again. After
:data:`REMAKE_TRIES` failed makes or resets in a row the copy is broken:
:class:`EnvCopyBroken`, which stops its actor with that reason.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

# A copy that cannot be made and reset this many times in a row is broken.
REMAKE_TRIES = 5
# The info keys: a step's fault, and the faults a reset got past (a line each).
STEP_FAULT = "env_fault"
RESET_FAULTS = "env_reset_faults"
# The longest cause line kept: a user's exception text can be anything.
CAUSE_CHARS = 200
# The copies of this process that are in a step or reset now: {id: (copy index, "step" or
# "reset", time.monotonic() at its start)}.
IN_STEP: dict[int, tuple[int, str, float]] = {}
# Where a vector env's info marks the copies that carry each key (gymnasium's ``_key``).
_STEP_FAULT_MASK, _RESET_FAULTS_MASK = f"_{STEP_FAULT}", f"_{RESET_FAULTS}"

logger = logging.getLogger(__name__)


class EnvCopyBroken(RuntimeError):
    """An env copy could not be made and reset :data:`REMAKE_TRIES` times in a row."""


def cause(exc: BaseException) -> str:
    """``"Type: last line"`` of an exception, at most :data:`CAUSE_CHARS` characters."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[-1]}" if text else type(exc).__name__
    return line[:CAUSE_CHARS]


class GuardedCopy(gym.Wrapper):
    """The copy ``make`` makes, made again when it fails (the module's notes).

    Args:
        make: makes one copy (its first make is not guarded: an env that cannot be made
            at all is the run's error, said at start).
        index: the copy's index in its vector env (named when it hangs).
        tries: makes and resets in a row before the copy is broken.
    """

    def __init__(
        self, make: Callable[[], gym.Env], index: int = 0, tries: int = REMAKE_TRIES
    ) -> None:
        super().__init__(make())
        self._make = make
        self._index = index
        self._tries = tries
        space = self.env.observation_space
        self._float = isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)
        self._last: Any = None

    def step(self, action):
        IN_STEP[id(self)] = (self._index, "step", time.monotonic())
        try:
            observation, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:  # a user's simulator: any error costs its episode
            line = cause(exc)
            self._remake(line)
            return self._faulted(line)
        finally:
            IN_STEP.pop(id(self), None)
        if not math.isfinite(reward):
            return self._faulted(f"non-finite reward: {reward}")
        if self._float and not np.isfinite(observation).all():
            return self._faulted("non-finite observation")
        self._last = observation
        return observation, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        causes: list[str] = []
        while True:
            # A seed that failed would fail again on a deterministic simulator.
            tried = seed if seed is None or not causes else seed + len(causes)
            IN_STEP[id(self)] = (self._index, "reset", time.monotonic())
            try:
                observation, info = self.env.reset(seed=tried, options=options)
                if not self._float or np.isfinite(observation).all():
                    break
                causes.append("non-finite observation at reset")
            except Exception as exc:  # a user's simulator, as in step
                causes.append(cause(exc))
            finally:
                IN_STEP.pop(id(self), None)
            self._give_up_after(causes)
            self._remake(causes[-1])
        self._last = observation
        if causes:
            info = {**info, RESET_FAULTS: "\n".join(causes)}
        return observation, info

    def _faulted(self, line: str):
        """The step a fault ends: truncated, the last good observation, no reward."""
        return self._last, 0.0, False, True, {STEP_FAULT: line}

    def _remake(self, line: str) -> None:
        """A new copy in the old one's place, until :data:`REMAKE_TRIES` in a row fail."""
        failed: list[str] = [line]
        with contextlib.suppress(Exception):  # what a broken copy does on close is moot
            self.env.close()
        while True:
            try:
                self.env = self._make()
                return
            except Exception as exc:  # making it again may fail as the step did
                failed.append(cause(exc))
                self._give_up_after(failed)

    def _give_up_after(self, causes: list[str]) -> None:
        if len(causes) >= self._tries:
            raise EnvCopyBroken(
                f"an env copy failed {len(causes)} times in a row while "
                f"being made again; the last: {causes[-1]}"
            )


# Kinds of fault a tally keeps apart; any more are pooled under OTHER_KIND.
KINDS_KEPT = 16
OTHER_KIND = "other"


class FaultTally:
    """The faults an actor's (or the evaluator's) copies got past, by kind (the cause's
    first word: its exception type, or "non-finite"), each with its count and latest
    line. ``say_first``: log the first fault of each kind."""

    def __init__(self, say_first: bool = True) -> None:
        self.say_first = say_first
        self.kinds: dict[str, list] = {}  # kind: [count, latest line]
        self.total = 0
        self.latest = ""
        self.replayed = 0  # episodes an evaluation played again for them

    def add(self, line: str) -> None:
        kind = line.split(":", 1)[0].split(" ", 1)[0] or OTHER_KIND
        if kind not in self.kinds and len(self.kinds) >= KINDS_KEPT:
            kind = OTHER_KIND
        entry = self.kinds.setdefault(kind, [0, ""])
        entry[0] += 1
        entry[1] = line
        self.latest = line
        self.total += 1
        if entry[0] == 1 and self.say_first:
            logger.warning("env copy fault (the first %s): %s", kind, line)

    def take(self, info: dict) -> np.ndarray | None:
        """Counts the faults a vector env's step (or reset) ``info`` reports; returns the
        copies whose step faulted (None: none did). A step's fault is in the step's
        info, or under ``final_info`` where the copy was reset in the same step."""
        faulted = None
        for where in (info, info.get("final_info") or {}):
            mask = where.get(_STEP_FAULT_MASK)
            if mask is not None and mask.any():
                faulted = mask.copy() if faulted is None else faulted | mask
                for line in where[STEP_FAULT][mask]:
                    self.add(str(line))
        resets = info.get(_RESET_FAULTS_MASK)
        if resets is not None and resets.any():
            for lines in info[RESET_FAULTS][resets]:
                for line in str(lines).splitlines():
                    self.add(line)
        return faulted

    def summary(self) -> dict[str, list]:
        """``{kind: [count, latest line]}``, a copy."""
        return {kind: list(entry) for kind, entry in self.kinds.items()}
