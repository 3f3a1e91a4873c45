"""The actors' numpy MLP against the learner's torch network it stands in for."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from apex.networks import DuelingMLP
from apex.policy import NumpyDuelingMLP, TorchPolicy, build_policy


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
        "import apex.actor\n"
        "class NoLoop:\n"
        "    def __init__(self, config, acting, endpoints, security): self.config = config\n"
        "    def run(self): pass\n"
        "    def stop(self): pass\n"
        "apex.actor.Actor = NoLoop\n"
        "from apex.policy import build_policy\n"
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
