"""Ape-X DPG: the TD3 maths on a case small enough to compute by hand, the numpy actor
against the torch networks, exploration noise, the algorithm chosen from the action space,
and a short real Pendulum run that learns and resumes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from apex.algorithms.dpg.learner import DPG
from apex.algorithms.dpg.settings import DPGSettings as Settings
from apex.algorithms.exploration import gaussian_noise
from apex.algorithms.networks import ActorCritic
from apex.algorithms.nstep import NStepBuilder
from apex.algorithms.policy import NumpyActorCritic
from apex.algorithms.registry import choose
from apex.envs.families import env_shape
from apex.learning.metrics import read_metrics
from apex.learning.staging import DeviceBatch
from apex.settings import LearnerConfig
from launch.cli import main

LOW, HIGH = (-2.0,), (2.0,)


def constant_td3(policy_delay: int = 2, tau: float = 0.5, twin_critics: bool = True) -> DPG:
    """TD3 on 1-d observations and actions whose every weight is 0: each network outputs
    its last bias, whatever it is given, so every value below is plain arithmetic."""
    config = LearnerConfig(hidden=(4,), priority_epsilon=1e-3, max_grad_norm=1e6)
    settings = Settings(
        policy_delay=policy_delay,
        tau=tau,
        target_noise=0.2,
        twin_critics=twin_critics,
        noise_clip=0.5,
    )
    algorithm = DPG(config, settings, 1, LOW, HIGH, torch.device("cpu"))
    with torch.no_grad():
        for network in (
            algorithm.online,
            algorithm.critic2,
            algorithm.target,
            algorithm.target_critic2,
        ):
            for parameter in network.parameters():
                parameter.zero_()
        critics = (
            (algorithm.online.critic, 1.0),
            (algorithm.target.critic, 1.0),
            (algorithm.critic2, 2.0),
            (algorithm.target_critic2, 2.0),
        )
        for critic, bias in critics:
            critic.net[-1].bias.fill_(bias)
        algorithm.online.policy.net[-1].bias.fill_(0.5)
    return algorithm


def batch(rewards, discounts, weights) -> DeviceBatch:
    count = len(rewards)
    transitions = {
        "obs": torch.zeros(count, 1),
        "next_obs": torch.ones(count, 1),
        "action": torch.full((count, 1), 0.3),
        "reward": torch.tensor(rewards, dtype=torch.float32),
        "discount": torch.tensor(discounts, dtype=torch.float32),
    }
    return DeviceBatch(transitions=transitions, weights=torch.tensor(weights), source=None)


def test_td3_targets_loss_and_priorities_match_the_hand_computed_case() -> None:
    algorithm = constant_td3()
    # Q1 = 1 and Q2 = 2 everywhere (targets too): y = R + d · min(1, 2).
    # y = [1 + 0.9, 0.5] = [1.9, 0.5]; δ1 = y − 1 = [0.9, −0.5]; δ2 = y − 2 = [−0.1, −1.5]
    # L = mean(w · (δ1² + δ2²)) = mean(1 · 0.82, 0.5 · 2.5) = 1.035
    result = algorithm.step(batch([1.0, 0.5], [0.9, 0.0], [1.0, 0.5]))
    assert result.loss == pytest.approx(1.035, rel=1e-6)
    assert result.mean_abs_td == pytest.approx(0.7, rel=1e-6)
    np.testing.assert_allclose(result.new_priorities.numpy(), [0.901, 0.501], rtol=1e-6)
    assert result.new_priorities.dtype == torch.float64


def test_one_critic_is_plain_ddpg() -> None:
    algorithm = constant_td3(twin_critics=False)
    # y = R + d · Q1' = [1.9, 0.5]; L = mean(w · δ1²) = mean(0.81, 0.5 · 0.25) = 0.4675
    result = algorithm.step(batch([1.0, 0.5], [0.9, 0.0], [1.0, 0.5]))
    assert result.loss == pytest.approx(0.4675, rel=1e-6)
    np.testing.assert_allclose(result.new_priorities.numpy(), [0.901, 0.501], rtol=1e-6)


def test_the_policy_moves_every_policy_delay_steps_and_targets_follow_by_tau() -> None:
    algorithm = constant_td3(policy_delay=2, tau=0.5)
    policy_bias = algorithm.online.policy.net[-1].bias
    target_bias = algorithm.target.policy.net[-1].bias
    algorithm.step(batch([1.0], [0.9], [1.0]))
    assert policy_bias.item() == 0.5 and target_bias.item() == 0.0  # critics only
    # The critic ignores its input (zero weights): no gradient reaches the policy, and
    # the target policy moves half way to the online one: 0 + 0.5 · (0.5 − 0) = 0.25.
    algorithm.step(batch([1.0], [0.9], [1.0]))
    assert policy_bias.item() == 0.5
    assert target_bias.item() == pytest.approx(0.25)


def test_td3_resumes_from_its_state_dict() -> None:
    first = DPG(LearnerConfig(hidden=(8, 8)), Settings(), 3, LOW, HIGH, torch.device("cpu"))
    rng = np.random.default_rng(0)
    for _ in range(3):
        first.step(
            DeviceBatch(
                transitions={
                    "obs": torch.from_numpy(rng.standard_normal((16, 3), dtype=np.float32)),
                    "next_obs": torch.from_numpy(rng.standard_normal((16, 3), dtype=np.float32)),
                    "action": torch.from_numpy(rng.uniform(-2, 2, (16, 1)).astype(np.float32)),
                    "reward": torch.ones(16),
                    "discount": torch.full((16,), 0.9),
                },
                weights=torch.ones(16),
                source=None,
            )
        )
    second = DPG(LearnerConfig(hidden=(8, 8)), Settings(), 3, LOW, HIGH, torch.device("cpu"))
    second.load_state_dict(first.state_dict())
    assert second.steps == 3
    for a, b in zip(
        first.state_dict()["critic2"].values(), second.state_dict()["critic2"].values(), strict=True
    ):
        assert torch.equal(a, b)


def test_the_numpy_actor_critic_equals_the_torch_one() -> None:
    torch.manual_seed(1)
    network = ActorCritic(3, (-2.0, 0.0), (2.0, 1.0), (16, 8))
    state = network.state_dict()
    numpy_policy = NumpyActorCritic(3, (-2.0, 0.0), (2.0, 1.0), (16, 8), seed=0)
    # Same names, order and shapes as the published state_dict.
    assert list(numpy_policy.parameter_shapes()) == list(state)
    assert numpy_policy.parameter_shapes() == {k: tuple(v.shape) for k, v in state.items()}
    numpy_policy.load({name: tensor.numpy() for name, tensor in state.items()})
    observations = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    with torch.no_grad():
        actions = network(torch.from_numpy(observations))
        q = network.critic(torch.from_numpy(observations), actions)
    np.testing.assert_allclose(numpy_policy.actions(observations), actions.numpy(), atol=1e-5)
    np.testing.assert_allclose(numpy_policy.q(observations, actions.numpy()), q.numpy(), atol=1e-5)
    assert (actions[:, 0].abs() <= 2).all() and ((actions[:, 1] >= 0) & (actions[:, 1] <= 1)).all()


def test_gaussian_noise_has_its_scale_per_row_and_stays_in_bounds() -> None:
    rng = np.random.default_rng(0)
    actions = np.zeros((3, 2000), dtype=np.float32)
    half, centre = np.full(2000, 2.0, np.float32), np.zeros(2000, np.float32)
    noisy = gaussian_noise(actions, np.array([0.0, 0.1, 10.0]), half, centre, rng)
    assert (noisy[0] == 0).all()  # scale 0: the policy's own action
    assert noisy[1].std() == pytest.approx(0.2, rel=0.1)  # σ = 0.1 × half range 2
    assert np.abs(noisy).max() <= 2.0 and noisy.dtype == np.float32


def test_nstep_builder_carries_continuous_actions() -> None:
    builder = NStepBuilder(2, 2, 0.5, (1,), np.dtype(np.float32), (1,), np.dtype(np.float32))
    step = {
        "observations": np.zeros((2, 1), np.float32),
        "rewards": np.ones(2),
        "next_observations": np.ones((2, 1), np.float32),
    }
    assert builder.step(
        step["observations"],
        np.array([[0.1], [0.2]], np.float32),
        step["rewards"],
        step["next_observations"],
        np.zeros(2, bool),
        np.zeros(2, bool),
    )["action"].shape == (0, 1)
    out = builder.step(
        step["observations"],
        np.array([[0.3], [0.4]], np.float32),
        step["rewards"],
        step["next_observations"],
        np.zeros(2, bool),
        np.zeros(2, bool),
    )
    np.testing.assert_allclose(out["action"], [[0.1], [0.2]])
    assert out["action"].dtype == np.float32 and out["reward"].tolist() == [1.5, 1.5]


def test_the_action_space_chooses_the_algorithm_and_a_mismatch_stops_train(tmp_path) -> None:
    pendulum, cartpole = env_shape("Pendulum-v1"), env_shape("CartPole-v1")
    assert pendulum.continuous and pendulum.transition_spec()["action"].shape == (1,)
    assert choose("auto", pendulum).name == "dpg"
    assert choose("auto", cartpole).name == "dqn"
    runner = CliRunner()
    for env, algorithm, said in (
        ("Pendulum-v1", "dqn", "DQN needs Discrete"),
        ("CartPole-v1", "dpg", "DPG needs a continuous"),
    ):
        result = runner.invoke(
            main,
            [
                "train",
                "--env",
                env,
                "--set",
                f"algorithm={algorithm}",
                "--run-dir",
                str(tmp_path / env),
            ],
        )
        assert result.exit_code == 2 and said in result.output, result.output
        assert not (tmp_path / env).exists()
    result = runner.invoke(main, ["train", "--set", "algorithm=ddpg"])
    assert result.exit_code == 2 and "algorithm must be one of auto, dqn, dpg" in result.output


@pytest.mark.slow
def test_a_short_pendulum_run_learns(tmp_path: Path) -> None:
    """Ape-X DPG end to end. Resuming is proved once, for any algorithm, by
    tests/test_train.py (the checkpoint path does not depend on it), and DPG's own state
    by test_td3_resumes_from_its_state_dict."""
    run_dir = tmp_path / "pendulum"
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        "--env",
        "Pendulum-v1",
        "--run-dir",
        str(run_dir),
        "--max-updates",
        "3000",
        "--max-time",
        "150",
        "--target-return",
        "-400",
        "--plain",
        # Bounded by updates, not time: on an idle machine the policy is past -1,000
        # at about 1,100 updates and confirms -400 by about 2,200, in 20 s; a loaded
        # suite's learner made too few updates in a fixed 30 s to learn at all.
        # Evaluations of 5 episodes every 1,000 env steps, so that three or more come
        # however the actors' pace compares with the learner's.
        "--set",
        "learner.eval_episodes=5",
        "--set",
        "learner.eval_every_steps=1000",
        "--no-curves",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    evaluations = [
        r["eval_return_mean"] for r in read_metrics(run_dir) if r.get("event") == "evaluation"
    ]
    # A random Pendulum policy scores about −1,200 to −1,500; within 3,000 updates the policy
    # must be clearly better (a confirmed −400 ends the run sooner: the suite's time).
    assert len(evaluations) >= 3 and max(evaluations) >= evaluations[0] + 200, evaluations
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algorithm"] == "auto" and config["learner"]["algorithm"] == "auto"
    [start] = [r for r in read_metrics(run_dir) if r.get("event") == "start"]
    assert start["algorithm"] == "DDPG"
    end = [r for r in read_metrics(run_dir) if r.get("event") == "end"][-1]
    assert end["reason"] in ("max_updates", "solved") and Path(end["checkpoint"]).exists()
