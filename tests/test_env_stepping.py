"""An actor's env copies stepped one after another, on threads or in processes
(``apex.envs.stepping``): the same observations, rewards, episode ends and n-step
transitions for the same seeds and actions; only who waits changes."""

from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import pytest

from apex.acting.env_group import make_groups
from apex.envs.families import env_shape
from apex.envs.presets import EnvPreset, register, unregister
from apex.envs.stepping import ENV_STEPPINGS, ThreadedVectorEnv, vector_env
from apex.envs.vector import actor_envs, evaluation_envs
from apex.settings import ActorConfig
from apex.settings.actor import ENV_STEPPINGS as SETTINGS_STEPPINGS
from tests.scripted_acting import scripted
from tests.test_env_group import PoleAnglePolicy

SLOW = "CartPole-v1-slow"


@pytest.fixture
def slow_cartpole():
    """A run's own env: CartPole whose steps sleep 1 ms (``bench.scaling.step_cost``)."""
    register(
        EnvPreset(
            SLOW,
            475.0,
            gym_id=SLOW,
            make="bench.scaling.step_cost:make",
            kwargs={"id": "CartPole-v1", "cost_s": 0.001, "cost_kind": "sleep"},
        )
    )
    yield SLOW
    unregister(SLOW)


def rollout(envs: gym.vector.VectorEnv, steps: int, seed: int) -> dict[str, list]:
    """What ``envs`` return over ``steps`` steps of seeded random actions."""
    rng = np.random.default_rng(seed)
    seen: dict[str, list] = collections.defaultdict(list)
    try:
        observations, _ = envs.reset(seed=seed)
        seen["obs"].append(observations)
        for _ in range(steps):
            actions = rng.integers(2, size=envs.num_envs)
            observations, rewards, terminated, truncated, info = envs.step(actions)
            for name, value in (
                ("obs", observations),
                ("reward", rewards),
                ("terminated", terminated),
                ("truncated", truncated),
            ):
                seen[name].append(np.asarray(value))
            if "final_obs" in info:
                ended = np.flatnonzero(info["_final_obs"])
                seen["final"].append(np.stack([info["final_obs"][i] for i in ended]))
    finally:
        envs.close()
    return seen


def assert_same(expected: dict[str, list], got: dict[str, list]) -> None:
    assert expected.keys() == got.keys()
    for name, values in expected.items():
        np.testing.assert_array_equal(
            np.concatenate(values), np.concatenate(got[name]), err_msg=name
        )


@pytest.mark.parametrize(
    "mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP]
)
def test_threads_step_as_one_after_another_does(mode) -> None:
    def factories():
        return [lambda: gym.make("CartPole-v1") for _ in range(5)]

    serial = rollout(gym.vector.SyncVectorEnv(factories(), autoreset_mode=mode), 120, 7)
    threaded = rollout(ThreadedVectorEnv(factories(), autoreset_mode=mode), 120, 7)
    assert np.concatenate(serial["terminated"]).sum() >= 5  # episodes ended and restarted
    assert_same(serial, threaded)


@pytest.mark.slow
@pytest.mark.parametrize("stepping", ["threads", "processes"])
def test_a_run_s_own_env_steps_alike_in_every_mode(slow_cartpole: str, stepping: str) -> None:
    """The run's own preset (a factory with arguments) reaches a copy's own process."""
    serial = rollout(actor_envs(slow_cartpole, 4), 60, 3)
    assert_same(serial, rollout(actor_envs(slow_cartpole, 4, stepping=stepping), 60, 3))
    assert_same(
        rollout(evaluation_envs(slow_cartpole, 3), 30, 4),
        rollout(evaluation_envs(slow_cartpole, 3, stepping), 30, 4),
    )


def cartpole_transitions(stepping: str, rounds: int) -> dict[str, np.ndarray]:
    """Every n-step transition an actor's three CartPole envs make in ``rounds`` steps."""
    config = ActorConfig(
        env="CartPole-v1", envs_per_actor=3, n_step=3, seed=11, env_stepping=stepping
    )
    [group] = make_groups(
        config, env_shape("CartPole-v1"), scripted(PoleAnglePolicy()), None, lambda: 0, np.zeros(3)
    )
    parts: dict[str, list[np.ndarray]] = collections.defaultdict(list)
    rng = np.random.default_rng(0)
    try:
        group.begin(config.actor_seed)
        for _ in range(rounds):
            group.act(rng)
            for name, values in (group.finish().experience or {}).items():
                parts[name].append(values)
    finally:
        group.close()
    return {name: np.concatenate(values) for name, values in parts.items()}


@pytest.mark.slow
@pytest.mark.parametrize("stepping", ["threads", "processes"])
def test_concurrent_copies_make_the_transitions_lock_step_makes(stepping: str) -> None:
    serial = cartpole_transitions("serial", 150)
    concurrent = cartpole_transitions(stepping, 150)
    assert len(serial["action"]) >= 3 * (150 - 3)
    assert serial.keys() == concurrent.keys()
    for name in serial:
        np.testing.assert_array_equal(serial[name], concurrent[name], err_msg=name)


def test_an_unknown_stepping_is_refused() -> None:
    with pytest.raises(ValueError, match="env stepping must be one of"):
        vector_env([lambda: gym.make("CartPole-v1")], "fibers")  # type: ignore[arg-type]
    assert SETTINGS_STEPPINGS == ENV_STEPPINGS  # the settings name the modes without env code
    [problem] = ActorConfig(env_stepping="fibers").problems()
    assert problem == (
        "actor.env_stepping must be one of ('serial', 'threads', 'processes'), got 'fibers'"
    )
