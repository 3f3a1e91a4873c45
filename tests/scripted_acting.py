"""Scripted acting policies for the actor's tests: what a policy acts with, made up, on the
seam the real ones use (``apex.algorithms.protocols``)."""

from __future__ import annotations

from apex.algorithms.dqn.builder import DQNBuilder
from apex.algorithms.dqn.settings import DQNSettings
from apex.algorithms.nstep_experience import NStepExperience
from apex.algorithms.protocols import Acting


class PlainNStep(DQNBuilder):
    """DQN's builder, with priorities from the policy's ``td_errors`` at sending time: a
    scripted policy has no values to reuse."""

    def build_experience(self, actor, settings, shape, policy, version, frame_refs):
        return NStepExperience(actor, shape, policy, frame_refs)


def scripted(policy) -> Acting:
    """``policy`` (``explore``, ``td_errors``, FeedForward's state) as a DQN actor's."""
    return Acting(policy, PlainNStep(), DQNSettings())
