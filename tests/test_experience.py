"""The actor's experience maker: priorities from the values it acted on are the ones a
forward pass over the sent transitions gives, across episode ends."""

from __future__ import annotations

import numpy as np

from apex.acting.experience import ExperienceMaker
from apex.algorithms.nstep_experience import VALUE_FIELDS
from apex.algorithms.registry import build_acting, default_sections
from apex.envs.families import env_shape
from apex.envs.vector import actor_envs
from apex.settings import ActorConfig


def test_priorities_from_acting_values_equal_a_forward_pass_over_the_batch() -> None:
    config = ActorConfig(env="CartPole-v1", envs_per_actor=4, n_step=3, seed=5)
    shape = env_shape(config.env)
    acting = build_acting(config, default_sections(), shape)
    policy = acting.policy
    maker = ExperienceMaker(config, acting.experience(config, shape, lambda: 0, False), None)
    envs = actor_envs(config.env, config.envs_per_actor)
    rng = np.random.default_rng(0)
    observations, _ = envs.reset(seed=[1, 2, 3, 4])
    maker.begin(observations)
    parts, ends = [], 0
    for _ in range(300):
        actions = maker.act(observations, np.full(4, 0.5), rng)
        following, rewards, terminated, truncated, info = envs.step(actions)
        ended = np.logical_or(terminated, truncated)
        final = following.copy()
        for env in np.flatnonzero(ended):
            final[env] = info["final_obs"][env]
        ends += int(ended.sum())
        out = maker.step(observations, actions, rewards, following, final, terminated, truncated)
        if len(out["action"]):
            parts.append(out)
        observations = following
    envs.close()
    batch = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    sent, priorities = maker.priorities(batch, 1e-3)
    assert ends > 4 and (batch["discount"] == 0).any(), "episodes ended within the test"
    assert not set(VALUE_FIELDS) & set(sent), "the values are not sent"
    np.testing.assert_allclose(priorities, policy.td_errors(sent) + 1e-3, rtol=1e-5, atol=1e-6)
