"""The algorithm seam: every registered algorithm's builder supplies its config section, its
learner, its acting policy and its experience builder; a run's config reads each section
as ``[NAME]``, and the names of before still, with a notice."""

from __future__ import annotations

import logging

import click
import numpy as np
import pytest
import torch

from apex.algorithms.registry import ALGORITHMS, SETTINGS, build_acting, build_algorithm, choose
from apex.envs.families import env_shape
from apex.settings import ActorConfig
from launch.config import ConfigError, resolve
from launch.overrides import run_overrides
from launch.renames import MOVED

ENVS = {"dqn": "CartPole-v1", "dpg": "Pendulum-v1"}
# Algorithms "auto" never picks: chosen by name only.
BY_NAME_ONLY = {"impala": "CartPole-v1", "r2d2": "CartPole-v1"}


def test_every_registered_algorithm_has_an_env_here_and_auto_picks_by_action_space() -> None:
    assert set(ENVS) | set(BY_NAME_ONLY) == {builder.name for builder in ALGORITHMS}
    assert ("auto", *ENVS, *BY_NAME_ONLY) == SETTINGS
    for name, env in ENVS.items():
        assert choose("auto", env_shape(env)).name == name


def _learner_and_acting(config):
    shape = env_shape(config.env)
    learner = build_algorithm(config.learner, config.algorithms, shape, torch.device("cpu"))
    acting = build_acting(config.actor_config(0), config.algorithms, shape)
    acting.policy.load(
        {
            k: v.numpy()
            for k, v in learner.policy.state_dict().items()
            if k in acting.policy.parameter_shapes()
        }
    )
    return shape, learner, acting


@pytest.mark.parametrize("name", sorted(ENVS))
def test_an_algorithm_learns_and_acts_through_the_seam_alone(name: str) -> None:
    """What the learner loop and the actor loop call, and nothing else: an update gives a
    priority per item, the actor's copy takes the learner's weights, explores within the
    action space, and its experience builder makes n-step transitions with a finite
    priority each."""
    config = resolve(
        {
            "env": ENVS[name],
            "algorithm": name,
            "learner": {"hidden": [16]},
            "actor": {"hidden": [16], "envs_per_actor": 5, "n_step": 1},
        }
    )
    shape, learner, acting = _learner_and_acting(config)
    assert acting.builder.name == name and learner.variant
    rng = np.random.default_rng(0)
    observations = rng.standard_normal((5, *shape.observation_shape)).astype(np.float32)
    experience = acting.experience(config.actor_config(0), shape, lambda: 1, frame_refs=False)
    experience.begin(observations)
    actions = experience.act(observations, np.full(5, 0.5), rng)
    assert len(actions) == 5
    if shape.continuous:
        assert np.all(actions >= shape.action_low) and np.all(actions <= shape.action_high)
    else:
        assert set(actions.tolist()) <= set(range(shape.actions))
    no = np.zeros(5, bool)
    out = experience.step(
        observations, actions, np.ones(5, np.float32), observations, observations, no, no, None
    )
    sent, priorities = experience.priorities(out, 1e-3)
    assert acting.transition_spec(shape, config.actor).check_batch(sent) == 5
    assert priorities.shape == (5,) and priorities.dtype == np.float64
    assert np.isfinite(priorities).all() and (priorities >= 1e-3).all()
    from apex.learning.staging import DeviceBatch

    tensors = {key: torch.as_tensor(value) for key, value in sent.items()}
    result = learner.step(DeviceBatch(tensors, torch.ones(5), None))
    assert result.new_priorities.shape == (5,) and bool((result.new_priorities > 0).all())


def test_impala_learns_and_acts_through_the_seam_alone() -> None:
    """IMPALA through the same seam: its actors build unrolls of their steps with the
    log-probabilities they acted with, its shards are queues, and an update sends no
    priorities back."""
    from apex.learning.staging import DeviceBatch

    config = resolve(
        {
            "algorithm": "impala",
            "learner": {"hidden": [16]},
            "impala": {"unroll_length": 3},
            "actor": {"hidden": [16], "envs_per_actor": 2},
        }
    )
    assert config.queues
    shape, learner, acting = _learner_and_acting(config)
    assert acting.builder.name == "impala" and acting.exploration_scale() is None
    spec = acting.transition_spec(shape, config.actor)
    experience = acting.experience(config.actor, shape, lambda: 7, frame_refs=False)
    rng = np.random.default_rng(0)
    observations = rng.standard_normal((2, 4)).astype(np.float32)
    experience.begin(observations)
    no = np.zeros(2, bool)
    for step in range(3):
        actions = experience.act(observations, np.ones(2), rng)
        out = experience.step(
            observations, actions, np.ones(2), observations, observations, no, no, None
        )
        assert (out is None) == (step < 2)
    spec.check_batch(out)
    assert out["version"].tolist() == [7, 7]
    np.testing.assert_allclose(out["log_prob"][:, -1], acting.policy.last_log_probs, rtol=1e-6)
    tensors = {key: torch.as_tensor(value) for key, value in out.items()}
    result = learner.step(DeviceBatch(tensors, torch.ones(2), None))
    assert result.new_priorities is None and np.isfinite(result.loss)


def test_each_algorithm_reads_its_own_section_and_names_its_problems() -> None:
    config = resolve({"dqn": {"target_update_period": 7}, "dpg": {"tau": 0.01}})
    assert config.algorithms["dqn"].target_update_period == 7
    assert config.algorithms["dpg"].tau == 0.01
    # The resolved config keeps each section under its name, and reads back the same.
    values = config.to_dict()
    assert values["dqn"] == {
        "epsilon": 0.4,
        "target_update_period": 7,
        "huber_delta": 1.0,
        "cuda_graph": True,
    }
    assert resolve(values) == config
    with pytest.raises(ConfigError) as refused:
        resolve({"dqn": {"target_update_period": 0, "typo": 1, "epsilon": 2.0}, "dpg": 3})
    said = str(refused.value)
    assert "dqn.epsilon must be in [0, 1], got 2.0" in said
    assert "dqn.target_update_period must be a positive integer, got 0" in said
    assert "dqn: unknown setting 'typo'" in said
    assert "dpg must be a table of settings, got 3" in said


def test_set_reaches_an_algorithm_s_section() -> None:
    overrides = run_overrides(
        settings=(
            "dqn.target_update_period=9",
            "dpg.twin_critics=true",
            "env.id=CartPole-v1",
            "env.kwargs.sutton_barto_reward=true",
        )
    )
    config = resolve(None, overrides)
    assert config.algorithms["dqn"].target_update_period == 9
    assert config.algorithms["dpg"].twin_critics is True
    assert config.env_kwargs == {"sutton_barto_reward": True}
    with pytest.raises(click.BadParameter, match=r"dqn\.x=1.*dqn was set to a value"):
        run_overrides(settings=("dqn=3", "dqn.x=1"))


def _nested(path: str, value: object) -> dict:
    head, *rest = path.split(".")
    return {head: _nested(".".join(rest), value) if rest else value}


def _at(config, path: str) -> object:
    found = config.to_dict()
    for part in path.split("."):
        found = found[part]
    return found


def _another(path: str, value: object) -> object:
    """A valid value other than a setting's default."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value is None:
        return 400.0
    for candidate in (value * 0.5 if value else 0.25, value * 2):
        try:
            resolve(_nested(path, candidate))
        except ConfigError:
            continue
        return candidate
    raise AssertionError(f"no other valid value for {path}")


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_the_names_of_before_are_read_as_the_new_with_a_notice(old, new, caplog) -> None:
    default = _at(resolve({}), new)
    value = _another(new, default)
    with caplog.at_level(logging.WARNING, logger="launch.renames"):
        config = resolve(_nested(old, value))
    assert _at(config, new) == value
    assert f"{old} is now {new}" in caplog.text
    # Given in both places, the new name wins.
    from launch.overrides import merge_overrides

    both = resolve(merge_overrides(_nested(old, value), _nested(new, default)))
    assert _at(both, new) == default


def test_the_margin_loss_s_settings_are_dropped_with_a_notice(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="launch.renames"):
        config = resolve({"learner": {"dqn": {"anchor_margin": 0.8, "anchor_weight": 1.0}}})
    assert "learner.dqn.anchor_margin is no longer read" in caplog.text
    assert config == resolve({})


def test_the_stays_solved_settings_are_dropped_with_a_notice(caplog) -> None:
    """A run directory written with ``[learner.solved]`` (or its names of before) resumes:
    the settings are gone, and each says so."""
    written = {
        "learner": {
            "solved": {"policy_average": 0.01, "restart": True, "settle_return": 495.0},
            "settle_return": 490.0,
            "dqn": {"back_to_anchor": True},
        }
    }
    with caplog.at_level(logging.WARNING, logger="launch.renames"):
        config = resolve(written)
    for old in (
        "learner.solved.policy_average",
        "learner.solved.restart",
        "learner.settle_return",
        "learner.dqn.back_to_anchor",
    ):
        assert f"{old} is no longer read: a run that trains on past its solve" in caplog.text
    assert config == resolve({})


def test_an_actor_takes_its_exploration_scale_from_its_algorithm_s_section() -> None:
    sections = resolve({"dqn": {"epsilon": 0.3}, "dpg": {"noise_scale": 0.7}}).algorithms
    for name, scale in (("dqn", 0.3), ("dpg", 0.7)):
        actor = ActorConfig(env=ENVS[name], actor_count=1, envs_per_actor=1, hidden=(8,))
        acting = build_acting(actor, sections, env_shape(actor.env))
        # One actor of one env copy explores at the base scale itself (Ape-X with N = 1).
        assert acting.builder.name == name and acting.exploration_scale() == scale


@pytest.mark.parametrize("name", ["dqn", "dpg", "impala"])
def test_a_learning_rate_schedule_reaches_every_optimizer_of_an_algorithm(name: str) -> None:
    from apex.algorithms.updates import set_learning_rate

    env = ENVS.get(name) or BY_NAME_ONLY[name]
    config = resolve(
        {
            "env": env,
            "algorithm": name,
            "learner": {
                "hidden": [16],
                "learning_rate": 1e-3,
                "learning_rate_final": 1e-4,
                "learning_rate_decay_updates": 100,
            },
            "actor": {"hidden": [16]},
        }
    )
    learner = build_algorithm(
        config.learner, config.algorithms, env_shape(config.env), torch.device("cpu")
    )
    parameters = {id(p) for o in learner.optimizers for g in o.param_groups for p in g["params"]}
    assert parameters >= {id(p) for p in learner.policy.parameters() if p.requires_grad}
    rates = [config.learner.learning_rate_at(u) for u in (0, 50, 100, 10_000)]
    assert rates == pytest.approx([1e-3, 5.5e-4, 1e-4, 1e-4])
    set_learning_rate(learner.optimizers, rates[1])
    assert {g["lr"] for o in learner.optimizers for g in o.param_groups} == {rates[1]}


def test_a_learning_rate_schedule_is_checked() -> None:
    with pytest.raises(ConfigError, match="learning_rate_decay_updates must be an integer >= 1"):
        resolve({"learner": {"learning_rate_final": 1e-4}})
    with pytest.raises(ConfigError, match="learning_rate_final must be > 0"):
        resolve({"learner": {"learning_rate_final": -1.0, "learning_rate_decay_updates": 10}})
    assert resolve({}).learner.learning_rate_at(10**6) == resolve({}).learner.learning_rate
    learner = resolve(
        {
            "learner": {
                "learning_rate": 1e-3,
                "learning_rate_final": 5e-4,
                "learning_rate_decay_updates": 100,
            }
        }
    ).learner
    assert learner.learning_rate_at(50) == pytest.approx(7.5e-4)
    assert learner.learning_rate_at(500) == 5e-4


@pytest.mark.parametrize("delta", [1.0, 10.0])
def test_dqn_s_huber_loss_turns_linear_past_its_delta(delta: float) -> None:
    """TD errors of about 5 and 50: past κ the loss grows linearly, under it as δ²/2."""
    from apex.algorithms.dqn.learner import dqn_loss

    torch.manual_seed(0)
    online, target = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
    observations = torch.randn(2, 4)
    q_taken = online(observations).detach()[:, 0]
    with torch.no_grad():
        online_next = online(observations).argmax(dim=1, keepdim=True)
        next_value = target(observations).gather(1, online_next).squeeze(1)
    targets = q_taken + torch.tensor([5.0, 50.0])  # the rewards that make these errors
    batch = {
        "obs": observations,
        "action": torch.zeros(2, dtype=torch.int64),
        "reward": targets - 0.9 * next_value,
        "discount": torch.full((2,), 0.9),
        "next_obs": observations,
    }
    weights = torch.tensor([1.0, 0.5])
    loss, magnitude = dqn_loss(online, target, batch, weights, huber_delta=delta)
    error = torch.tensor([5.0, 50.0])
    huber = torch.where(error < delta, 0.5 * error**2, delta * (error - 0.5 * delta))
    torch.testing.assert_close(magnitude, error, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(loss, (weights * huber).mean(), rtol=1e-5, atol=1e-4)


def test_dqn_refuses_a_huber_delta_not_above_zero() -> None:
    with pytest.raises(ConfigError, match=r"dqn\.huber_delta must be > 0, got 0"):
        resolve({"dqn": {"huber_delta": 0.0}})
