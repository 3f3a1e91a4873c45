"""IMPALA's pieces: the acting policy's sampling and numpy forward pass, the loss, and a
learner that learns a task whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from apex.algorithms.impala.acting import sample_actions
from apex.algorithms.impala.learner import Impala, impala_loss
from apex.algorithms.impala.settings import ImpalaSettings as Settings
from apex.algorithms.networks import PolicyValueNet
from apex.algorithms.policy import NumpyPolicyValueMLP
from apex.learning.staging import DeviceBatch
from apex.settings import LearnerConfig


def test_sampled_actions_follow_the_softmax_and_carry_its_log_probabilities():
    rng = np.random.default_rng(0)
    logits = np.array([[2.0, 0.0, -1.0, 0.5]] * 200_000, dtype=np.float32)
    actions, log_probs = sample_actions(logits, rng)
    expected = np.exp(logits[0] - logits[0].max())
    expected /= expected.sum()
    counts = np.bincount(actions, minlength=4)
    # Chi-square with 3 degrees of freedom at the 1e-6 level: 33.4.
    statistic = ((counts - expected * len(actions)) ** 2 / (expected * len(actions))).sum()
    assert statistic < 33.4, (counts, expected)
    np.testing.assert_allclose(log_probs, np.log(expected)[actions], rtol=1e-6)
    # Rows marked greedy take the most likely action, with its own log-probability.
    greedy, greedy_log_probs = sample_actions(logits[:4], rng, np.array([1, 0, 1, 0], bool))
    assert greedy[[0, 2]].tolist() == [0, 0]
    np.testing.assert_allclose(greedy_log_probs, np.log(expected)[greedy], rtol=1e-6)
    # Huge logits do not overflow: the largest is certain.
    sure, sure_log_probs = sample_actions(np.array([[1e4, 0.0, -1e4]], np.float32), rng)
    assert sure.tolist() == [0] and sure_log_probs[0] == pytest.approx(0.0)


def test_the_numpy_policy_value_forward_matches_torch_on_the_learners_weights():
    torch.manual_seed(1)
    network = PolicyValueNet((6,), 3, (32, 16))
    numpy_policy = NumpyPolicyValueMLP(6, 3, (32, 16), seed=0)
    shapes = {name: tuple(value.shape) for name, value in network.state_dict().items()}
    assert numpy_policy.parameter_shapes() == shapes
    numpy_policy.load({k: v.numpy() for k, v in network.state_dict().items()})
    observations = np.random.default_rng(2).normal(size=(9, 6)).astype(np.float32)
    logits, values = numpy_policy.logits_and_values(observations)
    with torch.no_grad():
        torch_logits, torch_values = network(torch.from_numpy(observations))
    np.testing.assert_allclose(logits, torch_logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, torch_values.numpy(), rtol=1e-5, atol=1e-5)


def _unrolls(network, rng, batch=32, steps=5, lag_logits=None):
    """Unrolls of a contextual bandit: observation (1, ±1), reward 1 when the action's
    index matches the sign (0 for -1, 1 for +1), episodes of one step. Actions come
    from the network (or from ``lag_logits``: an older policy)."""
    signs = rng.choice([-1.0, 1.0], size=(batch, steps + 1))
    observations = np.stack([np.ones_like(signs), signs], axis=-1).astype(np.float32)
    with torch.no_grad():
        logits, _ = network(torch.from_numpy(observations[:, :-1].reshape(-1, 2)))
    logits = logits.numpy() if lag_logits is None else lag_logits(observations[:, :-1])
    actions, log_probs = sample_actions(logits.reshape(batch * steps, -1), rng)
    actions, log_probs = actions.reshape(batch, steps), log_probs.reshape(batch, steps)
    rewards = (actions == (signs[:, :-1] > 0)).astype(np.float32)
    return {
        "obs": torch.from_numpy(observations),
        "action": torch.from_numpy(actions),
        "reward": torch.from_numpy(rewards),
        "discount": torch.zeros(batch, steps),
        "log_prob": torch.from_numpy(log_probs.astype(np.float32)),
    }


def test_an_impala_learner_learns_a_contextual_bandit():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    config = LearnerConfig(env="CartPole-v1", hidden=(32, 32), learning_rate=3e-3)
    learner = Impala(config, Settings(entropy_cost=0.001), (2,), 2, torch.device("cpu"))
    for _ in range(150):
        unrolls = _unrolls(learner.network, rng)
        learner.step(DeviceBatch(unrolls, torch.ones(32), None))
    with torch.no_grad():
        logits, values = learner.network(torch.tensor([[1.0, -1.0], [1.0, 1.0]]))
    right = torch.softmax(logits, dim=1)[[0, 1], [0, 1]]
    assert (right > 0.95).all(), right
    # Episodes of one step with reward 1 for the right action: V ≈ P(right) ≈ 1.
    assert values.numpy() == pytest.approx([1.0, 1.0], abs=0.15)
    assert learner.last.mean_rho == pytest.approx(1.0)  # on-policy: every ratio is 1


def test_the_correction_weighs_off_policy_unrolls_and_its_ablation_does_not():
    torch.manual_seed(0)
    network = PolicyValueNet((2,), 2, (16,))
    stale = lambda obs: np.tile([3.0, -3.0], (obs.shape[0] * obs.shape[1], 1))  # noqa: E731
    unrolls = _unrolls(network, np.random.default_rng(4), lag_logits=stale)
    _, corrected = impala_loss(network, unrolls, Settings())
    _, ablated = impala_loss(network, unrolls, Settings(correction=False))
    # μ picks action 0 with probability ~1 where π is near uniform: ρ = π/μ ≈ 0.5 for it.
    assert corrected.mean_rho < 0.9 and ablated.mean_rho == pytest.approx(1.0)
    # One-step episodes: v_s − V(x_s) = ρ_s (r_s − V(x_s)), shrunk by every ρ below 1.
    assert corrected.baseline_loss < ablated.baseline_loss
    assert corrected.policy_loss != pytest.approx(ablated.policy_loss)


def test_settings_problems_are_named():
    assert Settings().problems() == []
    problems = Settings(rho_bar=-1.0, entropy_cost=float("nan")).problems()
    assert any("rho_bar" in p for p in problems)
    assert any("entropy_cost" in p for p in problems)
    assert any("must not exceed" in p for p in Settings(rho_bar=1.0, c_bar=2.0).problems())
