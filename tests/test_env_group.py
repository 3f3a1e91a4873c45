"""An actor's envs in groups that take turns (``apex.acting.env_group``): the same transitions
as one group, every env its own seed, lane and episode ends."""

from __future__ import annotations

import collections
import hashlib

import numpy as np
import pytest

from apex.acting.env_group import make_groups
from apex.algorithms.acting_base import FeedForward
from apex.envs.families import env_shape
from apex.envs.vector import AtariStacks
from apex.settings import ActorConfig
from tests.scripted_acting import scripted

pytest.importorskip("ale_py")

# 200 steps an episode: a test of 260 rounds sees each env end one and start the next.
SHORT_FRAMES = 800


class FrameSumPolicy(FeedForward):
    """Acts on the observation alone (the newest frame's sum, modulo the actions): one
    env's actions do not depend on which others share its forward pass, where a
    network's float sums may break a near-tie differently at another batch size."""

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        return observations[:, -1].sum(axis=(1, 2), dtype=np.int64) % 6

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros(len(batch["action"]))


def transitions(env_groups: int, rounds: int) -> tuple[collections.Counter, list[float]]:
    """Every transition four Pong envs in ``env_groups`` groups make in ``rounds`` steps
    (a digest of its stacks, its action, reward and discount), and the ended episodes'
    returns."""
    config = ActorConfig(env="Pong", envs_per_actor=4, n_step=3, env_groups=env_groups, seed=5)
    shape = env_shape("Pong")

    def short_pong(name: str, count: int) -> AtariStacks:
        return AtariStacks(name, count, training=True, threads=1, max_frames=SHORT_FRAMES)

    groups = make_groups(
        config, shape, scripted(FrameSumPolicy()), None, lambda: 0, np.zeros(4), envs=short_pong
    )
    made: collections.Counter = collections.Counter()
    returns: list[float] = []
    rng = np.random.default_rng(0)
    try:
        for group in groups:
            group.begin(config.actor_seed)
            group.act(rng)
        for _ in range(rounds):
            for group in groups:
                done = group.finish()
                returns += done.returns
                group.act(rng)
                if done.experience is None:
                    continue
                out = done.experience
                for i in range(len(out["action"])):
                    digest = hashlib.blake2b(
                        out["obs"][i].tobytes() + out["next_obs"][i].tobytes(), digest_size=16
                    ).digest()
                    made[
                        (
                            digest,
                            int(out["action"][i]),
                            float(out["reward"][i]),
                            float(out["discount"][i]),
                        )
                    ] += 1
    finally:
        for group in groups:
            group.close()
    return made, sorted(returns)


@pytest.mark.slow
def test_two_groups_make_the_transitions_one_group_makes() -> None:
    one, one_returns = transitions(1, 260)
    two, two_returns = transitions(2, 260)
    assert sum(one.values()) >= 4 * (260 - 3)  # every step but each lane's last n
    assert one == two
    assert len(one_returns) >= 4 and one_returns == two_returns  # episodes ended alike


def test_env_groups_are_checked_against_the_env_and_the_env_count() -> None:
    assert ActorConfig(env="Pong", envs_per_actor=4, env_groups=2).problems() == []
    [odd] = ActorConfig(env="Pong", envs_per_actor=4, env_groups=3).problems()
    assert odd == "actor.env_groups (3) must divide actor.envs_per_actor (4)"
    [cartpole] = ActorConfig(env="CartPole-v1", envs_per_actor=4, env_groups=2).problems()
    assert "env_groups > 1 needs an ALE game" in cartpole
    assert "actor.env_groups" in ActorConfig(env_groups=0).problems()[0]


class PoleAnglePolicy(FeedForward):
    """Pushes toward the pole's lean: deterministic, so two runs of a seed match."""

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        return (observations[:, 2] > 0).astype(np.int64)

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros(len(batch["action"]))


def cartpole_steps(reward_scale: float, rounds: int) -> tuple[dict[str, np.ndarray], list[float]]:
    """Every n-step transition two CartPole envs make in ``rounds`` steps, and the ended
    episodes' returns."""
    config = ActorConfig(
        env="CartPole-v1", envs_per_actor=2, n_step=3, seed=3, reward_scale=reward_scale
    )
    shape = env_shape("CartPole-v1")
    [group] = make_groups(config, shape, scripted(PoleAnglePolicy()), None, lambda: 0, np.zeros(2))
    parts: dict[str, list[np.ndarray]] = collections.defaultdict(list)
    returns: list[float] = []
    rng = np.random.default_rng(0)
    try:
        group.begin(config.actor_seed)
        for _ in range(rounds):
            group.act(rng)
            done = group.finish()
            returns += done.returns
            for name, values in (done.experience or {}).items():
                parts[name].append(values)
    finally:
        group.close()
    return {name: np.concatenate(values) for name, values in parts.items()}, returns


def test_a_reward_scale_scales_what_is_sent_and_not_the_returns_reported() -> None:
    plain, plain_returns = cartpole_steps(1.0, 150)
    scaled, scaled_returns = cartpole_steps(0.25, 150)
    assert len(plain_returns) >= 2 and plain_returns == scaled_returns
    assert len(plain["reward"]) > 100 and plain["reward"].min() > 0
    np.testing.assert_allclose(scaled["reward"], 0.25 * plain["reward"], rtol=1e-6)
    for name in plain.keys() - {"reward"}:
        np.testing.assert_array_equal(scaled[name], plain[name], err_msg=name)
    [problem] = ActorConfig(reward_scale=0.0).problems()
    assert problem == "actor.reward_scale must be finite and > 0, got 0.0"
