"""The actors' numpy MLP against the learner's torch network it stands in for."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from apex.algorithms.networks import DuelingMLP
from apex.algorithms.policy import NumpyDuelingMLP, TorchPolicy, build_policy


@pytest.mark.parametrize("hidden", [(256, 256), (64,), (32, 48, 16)])
def test_numpy_mlp_takes_the_torch_state_dict_and_gives_its_q_values(hidden) -> None:
    torch.manual_seed(3)
    network = DuelingMLP(6, 5, hidden)
    state = network.state_dict()
    policy = NumpyDuelingMLP(6, 5, hidden, seed=0)
    assert policy.parameter_shapes() == {name: tuple(t.shape) for name, t in state.items()}
    assert list(policy.parameter_shapes()) == list(state)
    observations = np.random.default_rng(1).normal(size=(37, 6)).astype(np.float32)
    with torch.no_grad():
        expected = network(torch.from_numpy(observations)).numpy()
    before = policy.q_values(observations)
    assert not np.allclose(before, expected, atol=1e-3)  # its own start weights differ
    policy.load({name: t.numpy().copy() for name, t in state.items()})
    q = policy.q_values(observations)
    assert q.dtype == np.float32 and q.shape == (37, 5)
    np.testing.assert_allclose(q, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(q.argmax(axis=1), expected.argmax(axis=1))


def test_start_weights_depend_on_the_seed_only() -> None:
    observations = np.ones((2, 4), dtype=np.float32)
    first, again, other = (NumpyDuelingMLP(4, 2, (8, 8), seed) for seed in (5, 5, 6))
    np.testing.assert_array_equal(first.q_values(observations), again.q_values(observations))
    assert not np.array_equal(first.q_values(observations), other.q_values(observations))


def test_images_get_the_torch_network() -> None:
    policy = build_policy((4, 84, 84), 6, (), seed=0)
    assert isinstance(policy, TorchPolicy)
    frames = np.zeros((3, 4, 84, 84), dtype=np.uint8)
    assert policy.q_values(frames).shape == (3, 6)
    assert isinstance(build_policy((8,), 4, (16, 16), seed=0), NumpyDuelingMLP)


def test_a_vector_observation_actor_never_imports_torch() -> None:
    """Importing torch costs a CartPole actor about 1.5 s of CPU for nothing: 32 actors
    doing it at once on 2 cores delayed the learner's first update by 20 s. The actor
    role's entry point runs here with the actor's loop swapped for a no-op, since only
    what the entry point and the policy import is under test."""
    code = (
        "import sys\n"
        "import apex.acting.actor\n"
        "class NoLoop:\n"
        "    def __init__(self, config, acting, endpoints, security): self.config = config\n"
        "    def run(self): pass\n"
        "    def stop(self): pass\n"
        "apex.acting.actor.Actor = NoLoop\n"
        "from apex.algorithms.policy import build_policy\n"
        "from launch.config import resolve\n"
        "from launch.builder import actor\n"
        "from launch.roles import run_actor\n"
        "build_policy((4,), 2, (256, 256), seed=0)\n"
        "run_actor(actor(resolve({}), 0, (), 'tcp://127.0.0.1:1', 'tcp://127.0.0.1:2'))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]


@pytest.fixture(scope="module")
def pong_frames() -> np.ndarray:
    """480 stacks of real Pong frames from random play."""
    pytest.importorskip("ale_py")
    from apex.envs.vector import AtariStacks

    envs = AtariStacks("Pong", 8, training=True, threads=1)
    rng = np.random.default_rng(0)
    envs.reset(seed=list(range(8)))
    frames = []
    for _ in range(60):
        observations, *_ = envs.step(rng.integers(0, 6, 8))
        frames.append(observations.copy())
    envs.close()
    return np.concatenate(frames)


def _acting(policy, frames: np.ndarray) -> None:
    """Forward passes as an actor of 8 envs makes them (its calibration rows)."""
    for start in range(0, len(frames), 8):
        policy.q_values(frames[start : start + 8])


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int8_greedy_actions_are_the_float_ones_but_for_near_ties(pong_frames, seed) -> None:
    float_policy = build_policy((4, 84, 84), 6, (512,), seed=seed)
    int8_policy = build_policy((4, 84, 84), 6, (512,), seed=seed, precision="int8")
    _acting(int8_policy, pong_frames)
    expected, q = float_policy.q_values(pong_frames), int8_policy.q_values(pong_frames)
    error = np.abs(q - expected).max()
    assert error < 0.1 * expected.std()
    ordered = np.sort(expected, axis=1)
    margin = ordered[:, -1] - ordered[:, -2]
    differ = q.argmax(axis=1) != expected.argmax(axis=1)
    assert differ.mean() <= 0.05
    # A greedy action changes only where the float network's two best were within the
    # int8 network's error of each other.
    assert (margin[differ] <= 2 * error).all()


@pytest.mark.slow
def test_int8_policy_requantizes_the_weights_it_takes(pong_frames, monkeypatch) -> None:
    from apex.algorithms import int8_policy

    monkeypatch.setattr(int8_policy, "RECALIBRATE_SWAPS", 3)
    policy = build_policy((4, 84, 84), 6, (512,), seed=0, precision="int8")
    _acting(policy, pong_frames[:256])
    assert policy.quantizations == 1  # the calibration rows are not full yet
    _acting(policy, pong_frames)
    assert policy.quantizations == 2  # again once they are
    float_policy = build_policy((4, 84, 84), 6, (512,), seed=0)
    rng = np.random.default_rng(1)
    for load in range(1, 4):
        # The learner's next weights: close to the last ones.
        state = {
            name: t.numpy() * (1 + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)
            for name, t in float_policy.network.state_dict().items()
        }
        policy.load(state)
        float_policy.load(state)
        q = policy.q_values(pong_frames[:64])
        expected = float_policy.q_values(pong_frames[:64])
        assert np.abs(q - expected).max() < 0.1 * expected.std()
        # Weights alone are quantized again, and every third set is calibrated afresh.
        assert (policy.weight_swaps, policy.quantizations) == ((load, 2) if load < 3 else (2, 3))


def test_int8_policy_value_network_and_minatar_in_float(pong_frames) -> None:
    from apex.algorithms.policy import build_policy_value

    float_policy = build_policy_value((4, 84, 84), 6, (512,), seed=0)
    int8_policy = build_policy_value((4, 84, 84), 6, (512,), seed=0, precision="int8")
    for start in range(0, 256, 8):
        int8_policy.logits_and_values(pong_frames[start : start + 8])
    logits, values = int8_policy.logits_and_values(pong_frames[:64])
    expected_logits, expected_values = float_policy.logits_and_values(pong_frames[:64])
    # Both heads read the same features; the logits' spread is the scale of a readout
    # (a fresh value head's outputs barely differ from each other).
    scale = expected_logits.std()
    assert np.abs(logits - expected_logits).max() < 0.1 * scale
    assert np.abs(values - expected_values).max() < 0.1 * scale
    # The MinAtar network stays in float (int8 is for 84x84 frames).
    minatar = build_policy((10, 10, 4), 3, (128,), seed=0, precision="int8")
    assert isinstance(minatar, TorchPolicy)


def test_int8_policy_quantizes_new_weights_at_most_every_so_many_forward_passes(
    pong_frames,
) -> None:
    policy = build_policy((4, 84, 84), 6, (512,), seed=0, precision="int8", requantize_every=5)
    _acting(policy, pong_frames)
    _acting(policy, pong_frames)  # calibrated on full rows: two quantizations
    assert policy.quantizations == 2
    weights = policy.arrays()
    policy.load({name: array * 1.01 for name, array in weights.items()})
    swapped = policy.q_values(pong_frames[:8])  # many passes since: quantized at once
    assert policy.weight_swaps == 1
    # Weights arrive at every forward pass (as a busy learner's can): the int8 network
    # takes them only 5 passes after the last swap.
    for _ in range(4):
        policy.load({name: array * 1.02 for name, array in weights.items()})
        np.testing.assert_array_equal(policy.q_values(pong_frames[:8]), swapped)
    policy.load({name: array * 1.02 for name, array in weights.items()})
    assert not np.array_equal(policy.q_values(pong_frames[:8]), swapped)
    assert policy.weight_swaps == 2 and policy.quantizations == 2
