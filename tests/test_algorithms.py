"""The algorithm seam: every registered algorithm supplies its config section, its learner
step and its acting policy; a run's config reads each section as ``[learner.NAME]``, and
the flat names of before still, with a notice."""

from __future__ import annotations

import logging

import click
import numpy as np
import pytest
import torch

from apex.algorithms.registry import ALGORITHMS, SETTINGS, build_acting, build_algorithm, choose
from apex.envs.families import env_shape
from apex.settings import ActorConfig
from launch.config import MOVED, ConfigError, resolve
from launch.overrides import run_overrides

ENVS = {"dqn": "CartPole-v1", "dpg": "Pendulum-v1"}
# Algorithms "auto" never picks: chosen by name only.
BY_NAME_ONLY = {"impala": "CartPole-v1"}


def test_every_registered_algorithm_has_an_env_here_and_auto_picks_by_action_space() -> None:
    assert set(ENVS) | set(BY_NAME_ONLY) == {entry.name for entry in ALGORITHMS}
    assert ("auto", *ENVS, *BY_NAME_ONLY) == SETTINGS
    for name, env in ENVS.items():
        assert choose("auto", env_shape(env)).name == name


@pytest.mark.parametrize("name", sorted(ENVS))
def test_an_algorithm_learns_and_acts_through_the_seam_alone(name: str) -> None:
    """What the learner loop and the actor loop call, and nothing else: an update gives a
    priority per item, the actor's copy takes the learner's weights, explores within the
    action space and gives a finite |TD| per transition."""
    config = resolve({"env": ENVS[name], "algorithm": name, "learner": {"hidden": [16]},
                      "actor": {"hidden": [16]}})  # fmt: skip
    shape = env_shape(config.env)
    learner = build_algorithm(config.learner, shape, torch.device("cpu"))
    acting, entry = build_acting(config.actor_config(0), shape)
    assert entry.name == name
    acting.load({k: v.numpy() for k, v in learner.policy.state_dict().items()
                 if k in acting.parameter_shapes()})  # fmt: skip
    rng = np.random.default_rng(0)
    observations = rng.standard_normal((5, *shape.observation_shape)).astype(np.float32)
    actions = acting.explore(observations, np.full(5, 0.5), rng)
    assert len(actions) == 5
    if shape.continuous:
        assert np.all(actions >= shape.action_low) and np.all(actions <= shape.action_high)
    else:
        assert set(actions.tolist()) <= set(range(shape.actions))
    batch = {"obs": observations, "action": actions, "reward": np.ones(5, np.float32),
             "discount": np.full(5, 0.9, np.float32), "next_obs": observations}  # fmt: skip
    td = acting.td_errors(batch)
    assert td.shape == (5,) and td.dtype == np.float64 and np.isfinite(td).all()
    from apex.learning.staging import DeviceBatch

    tensors = {key: torch.as_tensor(value) for key, value in batch.items()}
    result = learner.step(DeviceBatch(tensors, torch.ones(5), None))
    assert result.new_priorities.shape == (5,) and bool((result.new_priorities > 0).all())


def test_impala_learns_and_acts_through_the_seam_alone() -> None:
    """IMPALA through the same seam: its actors build unrolls of their steps with the
    log-probabilities they acted with, its shards are queues, and an update sends no
    priorities back."""
    from apex.algorithms.impala.learner import build_experience
    from apex.algorithms.registry import transition_spec
    from apex.learning.staging import DeviceBatch
    from launch.builder import queues

    actor = {"hidden": [16], "unroll_length": 3, "envs_per_actor": 2}
    config = resolve({"algorithm": "impala", "learner": {"hidden": [16]}, "actor": actor})
    assert queues(config) and config.replay.samples_per_insert is None
    shape = env_shape(config.env)
    learner = build_algorithm(config.learner, shape, torch.device("cpu"))
    acting, entry = build_acting(config.actor_config(0), shape)
    assert entry.name == "impala" and entry.exploration is None
    acting.load({k: v.numpy() for k, v in learner.policy.state_dict().items()})
    spec = transition_spec(entry, shape, config.actor)
    experience = build_experience(config.actor, shape, acting, lambda: 7)
    rng = np.random.default_rng(0)
    observations = rng.standard_normal((2, 4)).astype(np.float32)
    no = np.zeros(2, bool)
    for step in range(3):
        actions = acting.explore(observations, np.ones(2), rng)
        out = experience.step(observations, actions, np.ones(2), observations, no, no)
        assert (out is None) == (step < 2)
    spec.check_batch(out)
    assert out["version"].tolist() == [7, 7]
    np.testing.assert_allclose(out["log_prob"][:, -1], acting.last_log_probs, rtol=1e-6)
    tensors = {key: torch.as_tensor(value) for key, value in out.items()}
    result = learner.step(DeviceBatch(tensors, torch.ones(2), None))
    assert result.new_priorities is None and np.isfinite(result.loss)


def test_each_algorithm_reads_its_own_section_and_names_its_problems() -> None:
    config = resolve({"learner": {"dqn": {"target_update_period": 7}, "dpg": {"tau": 0.01}}})
    assert config.learner.algorithms["dqn"].target_update_period == 7
    assert config.learner.algorithms["dpg"].tau == 0.01
    # The resolved config keeps each section under its name, and reads back the same.
    values = config.to_dict()
    # (CartPole's preset averages the policy from the solve on, from the confirmed weights,
    # held to their greedy actions.)
    assert values["learner"]["dqn"] == {"target_update_period": 7, "policy_average": 0.01,
                                        "average_from_solve": True,
                                        "restart_at_solve": True, "anchor_margin": 0.8,
                                        "anchor_weight": 1.0, "huber_delta": 1.0,
                                        "follow_better_confirmations": True,
                                        "follow_margin": 2.0, "back_to_anchor": True}  # fmt: skip
    assert resolve(values) == config
    with pytest.raises(ConfigError) as refused:
        resolve({"learner": {"dqn": {"target_update_period": 0, "typo": 1,
                                     "anchor_margin": -0.5}, "dpg": 3}})  # fmt: skip
    said = str(refused.value)
    assert "learner.dqn.anchor_margin must be a finite number >= 0, got -0.5" in said
    assert "learner.dqn.target_update_period must be a positive integer, got 0" in said
    assert "learner.dqn: unknown setting 'typo'" in said
    assert "learner.dpg must be a table of settings, got 3" in said


def test_set_reaches_an_algorithm_s_section() -> None:
    overrides = run_overrides(settings=("learner.dqn.target_update_period=9",
                                        "learner.dpg.twin_critics=true"))  # fmt: skip
    config = resolve(None, overrides)
    assert config.learner.algorithms["dqn"].target_update_period == 9
    assert config.learner.algorithms["dpg"].twin_critics is True
    with pytest.raises(click.BadParameter, match=r"learner\.dqn\.x=1.*dqn was set to a value"):
        run_overrides(settings=("learner.dqn=3", "learner.dqn.x=1"))


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_the_flat_names_of_before_are_read_as_the_new_with_a_notice(old, new, caplog) -> None:
    section, key = old.split(".")
    value = {"target_update_period": 11, "tau": 0.02, "twin_critics": True,
             "policy_delay": 3, "target_noise": 0.1, "noise_clip": 0.3}[key]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="launch.config"):
        config = resolve({section: {key: value}})
    _, algorithm, new_key = new.split(".")
    assert getattr(config.learner.algorithms[algorithm], new_key) == value
    assert f"{old} is now {new}" in caplog.text
    # Given in both places, the new name wins.
    both = resolve({section: {key: value, algorithm: {new_key: getattr(
        type(config.learner.algorithms[algorithm])(), new_key)}}})  # fmt: skip
    assert getattr(both.learner.algorithms[algorithm], new_key) != value


def test_an_actor_takes_its_exploration_scale_from_its_algorithm_s_setting() -> None:
    for name, scale in (("dqn", 0.3), ("dpg", 0.7)):
        actor = ActorConfig(env=ENVS[name], actor_count=1, envs_per_actor=1, hidden=(8,),
                            epsilon=0.3, noise_scale=0.7)  # fmt: skip
        _, entry = build_acting(actor, env_shape(actor.env))
        # One actor of one env copy explores at the base scale itself (Ape-X with N = 1).
        assert entry.name == name and getattr(actor, entry.exploration) == scale


@pytest.mark.parametrize("name", ["dqn", "dpg", "impala"])
def test_a_learning_rate_schedule_reaches_every_optimizer_of_an_algorithm(name: str) -> None:
    from apex.algorithms.updates import set_learning_rate

    env = ENVS.get(name) or BY_NAME_ONLY[name]
    config = resolve({"env": env, "algorithm": name, "learner": {
        "hidden": [16], "learning_rate": 1e-3, "learning_rate_final": 1e-4,
        "learning_rate_decay_updates": 100}, "actor": {"hidden": [16]}})  # fmt: skip
    learner = build_algorithm(config.learner, env_shape(config.env), torch.device("cpu"))
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
    with pytest.raises(ConfigError, match="learning_rate_solved must be > 0 or None"):
        resolve({"learner": {"learning_rate_solved": 0.0}})
    for bad in (float("nan"), float("inf"), "high"):
        with pytest.raises(ConfigError, match="settle_return must be"):
            resolve({"learner": {"settle_return": bad}})


def test_a_solved_run_trains_on_at_its_solved_step_size() -> None:
    learner = resolve({"learner": {"learning_rate": 1e-3, "learning_rate_final": 5e-4,
                                   "learning_rate_decay_updates": 100,
                                   "learning_rate_solved": 1e-5}}).learner  # fmt: skip
    assert learner.learning_rate_at(50) == pytest.approx(7.5e-4)
    assert learner.learning_rate_at(50, solved=True) == 1e-5
    plain = resolve({"env": "Acrobot-v1", "learner": {"learning_rate": 1e-3}}).learner
    assert plain.learning_rate_at(50, solved=True) == 1e-3  # no solved step size: unchanged


@pytest.mark.parametrize("margin", [0.0, 0.8])
def test_an_anchored_dqn_holds_the_confirmed_greedy_actions_while_td_learning_goes_on(
    margin: float,
) -> None:
    """``learner.dqn.anchor_margin``: from the solve, the online network's greedy actions
    on sampled states are held to the confirmed weights' while TD targets that want
    others pull at them; without it (0) TD learning alone moves them away."""
    from apex.learning.staging import DeviceBatch

    config = resolve({"env": "CartPole-v1", "actor": {"hidden": [32]}, "learner": {
        "hidden": [32], "learning_rate": 3e-3, "max_grad_norm": 100.0,
        "dqn": {"anchor_margin": margin, "anchor_weight": 1.0, "target_update_period": 10,
                "restart_at_solve": False}}})  # fmt: skip
    learner = build_algorithm(config.learner, env_shape("CartPole-v1"), torch.device("cpu"))
    assert learner.keeps_confirmed_weights == (margin > 0)
    confirmed = build_algorithm(config.learner, env_shape("CartPole-v1"), torch.device("cpu"))
    generator = torch.Generator().manual_seed(3)
    observations = torch.randn(256, 4, generator=generator)
    held = confirmed.online(observations).argmax(dim=1)
    learner.solved({k: v.clone() for k, v in confirmed.online.state_dict().items()})
    # Every transition rewards the action the confirmed network would not take, and ends.
    other = 1 - held
    batch = {"obs": observations, "action": other, "reward": torch.full((256,), 10.0),
             "discount": torch.zeros(256), "next_obs": observations}  # fmt: skip
    for _ in range(300):
        learner.step(DeviceBatch(batch, torch.ones(256), None))
    agreement = float((learner.online(observations).argmax(dim=1) == held).float().mean())
    if margin:
        assert agreement >= 0.95, agreement
        state = learner.state_dict()
        resumed = build_algorithm(config.learner, env_shape("CartPole-v1"), torch.device("cpu"))
        resumed.load_state_dict(state)
        resumed.solved(None)  # a resumed solved run: its anchor is the checkpointed one
        torch.testing.assert_close(resumed.anchor.network.state_dict(),
                                   confirmed.online.state_dict())  # fmt: skip
    else:
        assert agreement <= 0.5, agreement


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
    batch = {"obs": observations, "action": torch.zeros(2, dtype=torch.int64),
             "reward": targets - 0.9 * next_value, "discount": torch.full((2,), 0.9),
             "next_obs": observations}  # fmt: skip
    weights = torch.tensor([1.0, 0.5])
    loss, magnitude = dqn_loss(online, target, batch, weights, huber_delta=delta)
    error = torch.tensor([5.0, 50.0])
    huber = torch.where(error < delta, 0.5 * error**2, delta * (error - 0.5 * delta))
    torch.testing.assert_close(magnitude, error, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(loss, (weights * huber).mean(), rtol=1e-5, atol=1e-4)


def test_dqn_refuses_a_huber_delta_not_above_zero() -> None:
    with pytest.raises(ConfigError, match=r"learner\.dqn\.huber_delta must be > 0, got 0"):
        resolve({"learner": {"dqn": {"huber_delta": 0.0}}})
