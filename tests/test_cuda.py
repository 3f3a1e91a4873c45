"""The learner's CUDA path against its CPU path: staging and one update.

Skipped (and reported as skipped) where torch sees no CUDA device, as on this project's CI;
``scripts/gpu_check.sh`` runs them on a lent GPU machine.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from apex.algorithms.dqn.learner import dqn_step
from apex.algorithms.networks import build_network
from apex.algorithms.updates import adam
from apex.learning.staging import DeviceStager
from bench.parts.learner_phases import in_sampler_arrays, numpy_batch
from replay.store.spec import TransitionSpec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device"),
]


def test_a_staged_batch_reaches_the_device_unchanged() -> None:
    source = numpy_batch((4, 84, 84), 64)
    staged = DeviceStager("cuda")(source)
    for name, array in source.transitions.items():
        assert staged.transitions[name].device.type == "cuda"
        np.testing.assert_array_equal(staged.transitions[name].cpu().numpy(), array)
    np.testing.assert_array_equal(staged.weights.cpu().numpy(), source.weights)


def test_batches_in_pinned_slots_reach_the_device_and_each_slot_is_reused() -> None:
    stager = DeviceStager("cuda")
    for seed in range(5):
        source = numpy_batch((4, 84, 84), 64, seed)
        batch = in_sampler_arrays(source, stager)
        assert torch.from_numpy(batch.transitions["obs"]).is_pinned()  # no copy to pin it
        staged = stager(batch)
        # The slot is another batch's once its copy has run: the source no longer holds it.
        assert set(staged.source.transitions) == {"action", "reward", "discount"}
        torch.cuda.synchronize()
        for name, array in source.transitions.items():
            np.testing.assert_array_equal(staged.transitions[name].cpu().numpy(), array)
    assert stager.arrays.slots_made == 1
    # Two batches assembling at once hold two slots; one dropped unused is taken again.
    spec = TransitionSpec.from_dict({"obs": ((4, 84, 84), np.uint8)})
    first, second = stager.arrays.take(spec, 64), stager.arrays.take(spec, 64)
    assert first["obs"].ctypes.data != second["obs"].ctypes.data
    assert stager.arrays.give_back(second) == {"obs"}
    assert stager.arrays.take(spec, 64)["obs"].ctypes.data == second["obs"].ctypes.data


@pytest.mark.parametrize("shape", [(4,), (4, 84, 84)])
def test_an_update_on_cuda_matches_the_same_update_on_the_cpu(shape) -> None:
    torch.manual_seed(0)
    online = build_network(shape, 6, (64, 64) if len(shape) == 1 else (256,))
    source = numpy_batch(shape, 32)
    results = {}
    for device in ("cpu", "cuda"):
        net = copy.deepcopy(online).to(device)
        target = copy.deepcopy(net)
        optimizer = adam(net.parameters(), 1e-3, 1.5e-4)
        staged = DeviceStager(device)(source)
        result = dqn_step(net, target, optimizer, staged.transitions, staged.weights, 10.0, 1e-3)
        results[device] = (result, [p.detach().cpu() for p in net.parameters()])
    (cpu, cpu_params), (cuda, cuda_params) = results["cpu"], results["cuda"]
    assert cuda.new_priorities.device.type == "cpu"
    assert cuda.new_priorities.dtype == torch.float64
    # TF32 and other kernels differ in the last bits; the update must not differ in kind.
    assert cuda.loss == pytest.approx(cpu.loss, rel=2e-2)
    torch.testing.assert_close(cuda.new_priorities, cpu.new_priorities, rtol=2e-2, atol=2e-3)
    for a, b in zip(cpu_params, cuda_params, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)


def _double_dqn(shape, cuda_graph: bool, target_update_period: int = 4):
    from apex.algorithms.dqn.learner import DoubleDQN
    from apex.algorithms.dqn.settings import DQNSettings
    from apex.settings import LearnerConfig

    torch.manual_seed(0)
    hidden = (64, 64) if len(shape) == 1 else (256,)
    config = LearnerConfig(hidden=hidden, learning_rate=1e-3)
    settings = DQNSettings(target_update_period=target_update_period, cuda_graph=cuda_graph)
    return DoubleDQN(config, settings, shape, 6, torch.device("cuda"))


def _staged(shape, batch_size: int, seed: int):
    return DeviceStager("cuda")(numpy_batch(shape, batch_size, seed))


@pytest.fixture
def deterministic_cudnn():
    """cuDNN's deterministic convolutions: its default ones sum gradients in any order,
    and Adam's normalised step turns a last-bit difference in a near-zero gradient into a
    sizeable one in the parameter (seen on an H200: 5e-5 in 1.7% of a layer's weights)."""
    before = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before


@pytest.mark.parametrize("shape", [(4,), (4, 84, 84)])
def test_the_graphed_update_trains_as_the_eager_one(shape, deterministic_cudnn) -> None:
    """Warm-up, capture and replays (``apex.algorithms.dqn.graphed_step``) against eager updates
    from the same start on the same batches: the same losses, priorities and parameters, through
    target copies, a schedule's change of step size, a batch of another size (eager, the
    graph kept) and a checkpoint loaded in place. A step missed, repeated or taken at a
    stale step size would move most parameters by about the step size (1e-3, 2e-4)."""
    from apex.algorithms.updates import set_learning_rate

    graphed, eager = _double_dqn(shape, True), _double_dqn(shape, False)
    assert graphed.graphed is not None and eager.graphed is None

    def both_step(batch) -> None:
        ours, theirs = graphed.step(batch), eager.step(batch)
        assert ours.loss == pytest.approx(theirs.loss, rel=1e-4, abs=1e-6)
        assert ours.mean_abs_td == pytest.approx(theirs.mean_abs_td, rel=1e-4, abs=1e-6)
        assert ours.new_priorities.device.type == "cpu"
        assert ours.new_priorities.dtype == torch.float64
        torch.testing.assert_close(ours.new_priorities, theirs.new_priorities, rtol=1e-4, atol=1e-5)
        for a, b in zip(graphed.online.parameters(), eager.online.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5)

    for seed in range(10):
        if seed == 6:
            set_learning_rate(graphed.optimizers + eager.optimizers, 2e-4)
        both_step(_staged(shape, 32, seed))
    assert graphed.graphed.captured and graphed.graphed.replays == 10 - 3
    both_step(_staged(shape, 16, 10))  # another size: eager
    assert graphed.graphed.replays == 7
    saved = eager.state_dict()
    for seed in range(11, 14):
        both_step(_staged(shape, 32, seed))
    for algorithm in (graphed, eager):
        algorithm.load_state_dict(saved)
    both_step(_staged(shape, 32, 14))
    assert graphed.graphed.replays == 11 and not graphed.graphed.failed
