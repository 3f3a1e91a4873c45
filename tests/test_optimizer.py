"""apex.algorithms.optimizer.Adam: torch.optim.Adam's arithmetic and state dict, without
torch.optim."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from apex.algorithms.optimizer import Adam


def network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))


def train(module: torch.nn.Module, optimizer, steps: int, skip_last_every: int = 0) -> None:
    """``steps`` updates on a fixed loss; every ``skip_last_every``-th update leaves the last
    layer without a gradient (as DPG's policy loss leaves a critic's)."""
    inputs = torch.linspace(-1, 1, 64 * 4).reshape(64, 4)
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        module(inputs * (step + 1)).pow(2).mean().backward()
        if skip_last_every and step % skip_last_every == 0:
            for parameter in module[2].parameters():
                parameter.grad = None
        optimizer.step()


@pytest.mark.parametrize("fused", [True, False])
def test_steps_are_torch_adams_also_where_a_parameter_has_no_gradient(fused: bool) -> None:
    ours, theirs = network(), network()
    # Not fused: the multi-tensor path, for devices without the kernel.
    optimizer = Adam(ours.parameters(), lr=1e-2, eps=1e-5, fused=fused)
    train(ours, optimizer, 30, skip_last_every=3)
    train(theirs, torch.optim.Adam(theirs.parameters(), lr=1e-2, eps=1e-5, fused=fused), 30, 3)
    for mine, reference in zip(ours.parameters(), theirs.parameters(), strict=True):
        if fused:  # the same kernel: the same numbers
            assert torch.equal(mine, reference)
        else:
            torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)


def test_a_state_dict_loads_either_way_and_training_goes_on_alike() -> None:
    ours, theirs = network(), network()
    optimizer = Adam(ours.parameters(), lr=1e-2, eps=1e-5)
    reference = torch.optim.Adam(theirs.parameters(), lr=1e-2, eps=1e-5, fused=True)
    train(ours, optimizer, 10)
    train(theirs, reference, 10)
    # Ours into torch's, torch's into ours: the step size saved replaces the one given.
    swapped_theirs = torch.optim.Adam(theirs.parameters(), lr=1.0, eps=1e-5, fused=True)
    swapped_theirs.load_state_dict(optimizer.state_dict())
    swapped_ours = Adam(ours.parameters(), lr=1.0, eps=1.0)
    swapped_ours.load_state_dict(reference.state_dict())
    assert (
        swapped_ours.param_groups[0]["lr"] == 1e-2 and swapped_ours.param_groups[0]["eps"] == 1e-5
    )
    # The group says which path steps (torch.optim's key): fused here, unless asked not.
    assert swapped_ours.param_groups[0]["fused"]
    assert not Adam(network().parameters(), lr=1e-2, fused=False).param_groups[0]["fused"]
    train(ours, swapped_ours, 10)
    train(theirs, swapped_theirs, 10)
    for mine, other in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(mine, other)
    assert int(swapped_ours.state_dict()["state"][0]["step"]) == 20


def test_a_schedule_sets_the_step_size_between_steps() -> None:
    module = network()
    optimizer = Adam(module.parameters(), lr=1e-2, eps=1e-8)
    before = [p.detach().clone() for p in module.parameters()]
    optimizer.param_groups[0]["lr"] = 0.0
    train(module, optimizer, 3)
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_a_step_size_kept_on_the_device_follows_the_schedule() -> None:
    """What a CUDA graph's replays read (``apex.algorithms.dqn.graphed_step``): the group's lr,
    synced to a tensor before each step, steps as the float does, also after a schedule's change."""
    floats, on_device = network(), network()
    by_float = Adam(floats.parameters(), lr=1e-2)
    by_tensor = Adam(on_device.parameters(), lr=1e-2)
    by_tensor.keep_learning_rate_on_device()
    for rate in (1e-2, 3e-3, 0.0):
        for optimizer in (by_float, by_tensor):
            optimizer.param_groups[0]["lr"] = rate
        train(floats, by_float, 2)
        train(on_device, by_tensor, 2)
        for a, b in zip(floats.parameters(), on_device.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="fused kernel"):
        Adam(network().parameters(), lr=1e-3, fused=False).keep_learning_rate_on_device()


def test_bad_settings_and_a_state_dict_of_other_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="no parameters"):
        Adam([], lr=1e-3)
    with pytest.raises(ValueError, match="betas"):
        Adam(network().parameters(), lr=1e-3, betas=(0.9, 1.0))
    other = torch.nn.Linear(4, 2)
    saved = torch.optim.Adam(other.parameters(), lr=1e-3).state_dict()
    with pytest.raises(ValueError, match="2 parameters, this one 4"):
        Adam(network().parameters(), lr=1e-3).load_state_dict(saved)
    stepped = network()
    reference = torch.optim.Adam(stepped.parameters(), lr=1e-3)
    train(stepped, reference, 1)
    no_moments = reference.state_dict()
    del no_moments["state"][0]["exp_avg_sq"]
    with pytest.raises(ValueError, match="parameter 0 is not Adam's"):
        Adam(network().parameters(), lr=1e-3).load_state_dict(no_moments)
    amsgrad = torch.optim.Adam(network().parameters(), lr=1e-3, amsgrad=True).state_dict()
    with pytest.raises(ValueError, match="not plain Adam"):
        Adam(network().parameters(), lr=1e-3).load_state_dict(amsgrad)


@pytest.mark.slow
def test_a_learner_s_update_never_imports_the_torch_compiler() -> None:
    """The point of the class: torch.optim's first optimizer imports torch._dynamo, 1.6 s of
    every learner's start. A fresh process builds each algorithm and takes a step."""
    script = """
import sys
import numpy as np
import torch
from apex.algorithms.registry import build_algorithm
from apex.envs.families import env_shape
from apex.learning.staging import DeviceBatch
from launch.config import resolve
for name, env in (("dqn", "CartPole-v1"), ("dpg", "Pendulum-v1"), ("impala", "CartPole-v1")):
    config = resolve({"env": env, "algorithm": name})
    learner = build_algorithm(config.learner, config.algorithms, env_shape(env),
                              torch.device("cpu"))
    if name != "impala":  # an update on one batch of transitions
        shape = env_shape(env)
        observations = np.zeros((4, *shape.observation_shape), np.float32)
        if shape.continuous:
            actions = np.zeros((4, shape.actions), np.float32)
        else:
            actions = np.zeros(4, np.int64)
        batch = {"obs": observations, "action": actions, "reward": np.ones(4, np.float32),
                 "discount": np.full(4, 0.9, np.float32), "next_obs": observations}
        tensors = {key: torch.as_tensor(value) for key, value in batch.items()}
        learner.step(DeviceBatch(tensors, torch.ones(4), None))
print("torch._dynamo" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
