"""Learner suite: gradient updates per second by batch size, on the CPU and on CUDA when
present, for the dueling MLP (vector observations), the Nature CNN (Atari frames), and
Ape-X DPG's update at HalfCheetah's sizes, plain (``ddpg-mlp``, the default) and with
TD3's fixes (``td3-mlp``), and IMPALA's V-trace update on batches of unrolls of T = 20
(``impala-mlp`` at CartPole's sizes, ``impala-nature-cnn`` at Atari's; its ``samples``
count the unrolls' steps, B × T a batch), and R2D2's update on batches of sequences
(``r2d2-mlp``: the popgym preset's LSTM of 64 on sequences of 20 with a burn-in of 5;
``r2d2-nature-cnn``: R2D2's defaults, an LSTM of 512 on sequences of 80 with a burn-in of
40; a fifth of each batch starts its episode, as on a short-episode task; ``samples``
count B × m steps).

Each figure times ``apex.algorithms.dqn.learner.dqn_step`` (forward, double-DQN target, backward,
clipping, fused Adam) on a fixed random batch already on the device, so it is the learner's compute
ceiling, without replay or transport. On CUDA the DQN cases are timed a second time as the
learner runs them there, captured in a CUDA graph (``mlp-graph``, ``nature-cnn-graph``;
``apex.algorithms.dqn.graphed_step``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable

import numpy as np
import torch

from apex.algorithms.cpu_math import flush_denormals
from apex.algorithms.dpg.learner import DPG
from apex.algorithms.dqn.learner import DoubleDQN, dqn_step
from apex.algorithms.dqn.settings import DQNSettings
from apex.algorithms.networks import build_network
from apex.algorithms.r2d2.settings import R2D2Settings
from apex.algorithms.updates import adam
from apex.learning.staging import DeviceBatch
from apex.settings import LearnerConfig
from bench.parts.learner_phases import measure_phases
from bench.timing import measure_rate

SUITE = "learner"
# Where the phases of the DQN update are timed, by (network, device, quick): every batch
# size on CUDA, one each on the CPU (a Nature CNN update there takes up to half a second).
PHASE_BATCHES: dict[tuple[str, str, bool], tuple[int, ...]] = {
    ("mlp", "cuda", False): (64, 128, 256, 512),
    ("nature-cnn", "cuda", False): (64, 128, 256, 512),
    ("mlp", "cpu", False): (64,),
    ("nature-cnn", "cpu", False): (32,),
    ("mlp", "cpu", True): (32,),
    ("mlp", "cuda", True): (32,),
}
DPG_ACTIONS = 6
UNROLL_LENGTH = 20


def _batch(
    shape: tuple[int, ...], batch_size: int, device: torch.device
) -> dict[str, torch.Tensor]:
    def observations() -> torch.Tensor:
        if len(shape) == 3:
            return torch.randint(0, 256, (batch_size, *shape), dtype=torch.uint8, device=device)
        return torch.randn(batch_size, *shape, device=device)

    return {
        "obs": observations(),
        "action": torch.randint(0, 2, (batch_size,), device=device),
        "reward": torch.randn(batch_size, device=device),
        "discount": torch.full((batch_size,), 0.97, device=device),
        "next_obs": observations(),
    }


def run(
    *,
    quick: bool = False,
    repeats: int = 5,
    seconds_per_repeat: float | None = None,
    torch_threads: int = 2,
    device_types: tuple[str, ...] = ("cpu", "cuda"),
    networks: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Updates/s of each case on each device in ``device_types`` that torch sees here, and
    the phases of the DQN update (:mod:`bench.parts.learner_phases`) at the batch sizes in
    :data:`PHASE_BATCHES`; only the cases of ``networks`` (:data:`NETWORKS`) where given."""
    available = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [torch.device(kind) for kind in available if kind in device_types]
    unknown = set(networks) - set(NETWORKS)
    if unknown:
        raise ValueError(f"no learner case {sorted(unknown)}; the cases: {', '.join(NETWORKS)}")
    cases = [case for case in _cases(quick) if not networks or case[0] in networks]
    per_repeat = seconds_per_repeat or (0.05 if quick else 0.5)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    flush_denormals()  # as the learner role does
    records = []
    try:
        for device in devices:
            # On CUDA, DQN's update also as the learner runs it there: captured in a graph.
            graphed = [
                (f"{network}-graph", *rest) for network, *rest in cases if network in GRAPHED
            ]
            for network, shape, hidden, batch_sizes in cases + (
                graphed if device.type == "cuda" else []
            ):
                for batch_size in batch_sizes:
                    case = f"{network}-{device.type}-b{batch_size}"
                    if progress:
                        progress(f"learner {case}")
                    timing = {"repeats": repeats, "seconds_per_repeat": per_repeat}
                    updates = _measure(network, shape, hidden, batch_size, device, timing)
                    params = {
                        "network": network,
                        "device": device.type,
                        "batch_size": batch_size,
                        "torch_threads": torch_threads,
                    }
                    base = {"suite": SUITE, "case": case, "implementation": "apex", "status": "ok"}
                    records.append({**base, **updates, "params": params})
                    steps = batch_size * _steps_per_item(network)
                    records.append({**base, **_scaled(updates, steps), "params": params})
                    if batch_size in PHASE_BATCHES.get((network, device.type, quick), ()):
                        phase_timing = {**timing, "seconds_per_repeat": min(per_repeat, 0.25)}
                        phases = measure_phases(shape, hidden, batch_size, device, phase_timing)
                        records.extend(_phase_records(base, params, phases))
    finally:
        torch.set_num_threads(previous_threads)
        torch.set_flush_denormal(False)  # the default, for whatever runs next in-process
    config = {"quick": quick, "repeats": repeats, "seconds_per_repeat": per_repeat}
    return {"records": records, "ratios": [], "config": {**config, "torch_threads": torch_threads}}


NETWORKS = (
    "mlp",
    "nature-cnn",
    "ddpg-mlp",
    "td3-mlp",
    "impala-mlp",
    "impala-nature-cnn",
    "r2d2-mlp",
    "r2d2-nature-cnn",
)
GRAPHED = ("mlp", "nature-cnn")  # on CUDA, also as the learner runs DQN there: in a graph


def _cases(quick: bool) -> list[tuple]:
    """(network, observation shape, hidden, batch sizes) of every case."""
    cases = [("mlp", (4,), (256, 256), (32, 128, 512) if quick else (32, 64, 128, 256, 512))]
    cases.append(("nature-cnn", (4, 84, 84), (256,), (32,) if quick else (32, 64, 128, 256, 512)))
    # Ape-X DPG at HalfCheetah's sizes (17 observations, 6 actions, 256x256 nets): the
    # default DDPG update, and TD3's (two critics; the policy every second update).
    for variant in ("ddpg-mlp", "td3-mlp"):
        cases.append((variant, (17,), (256, 256), (256,) if quick else (64, 256, 512)))
    # IMPALA: batches of unrolls (its default is 32).
    cases.append(("impala-mlp", (4,), (256, 256), (32,) if quick else (8, 32, 128)))
    cases.append(("impala-nature-cnn", (4, 84, 84), (256,), (8,) if quick else (8, 32)))
    # R2D2: batches of sequences (its default is 64; the popgym preset's 32). An update of
    # 64 x 80 Atari steps takes seconds on the CPU: there, only the smallest batch.
    cases.append(("r2d2-mlp", (4,), (64,), (32,) if quick else (16, 32, 64)))
    if not quick:
        cases.append(("r2d2-nature-cnn", (4, 84, 84), (512,), (8, 64)))
    return cases


def _measure_dpg(
    variant: str, shape, hidden, batch_size: int, device: torch.device, timing: dict
) -> dict:
    from launch.config import resolve

    run = resolve({"env": "HalfCheetah-v5"})
    config, settings = dataclasses.replace(run.learner, hidden=hidden), run.algorithms["dpg"]
    if variant == "td3-mlp":
        td3 = {"twin_critics": True, "policy_delay": 2, "target_noise": 0.2}
        settings = dataclasses.replace(settings, **td3)
    low, high = -np.ones(DPG_ACTIONS, np.float32), np.ones(DPG_ACTIONS, np.float32)
    algorithm = DPG(config, settings, shape[0], low, high, device)
    transitions = {
        "obs": torch.randn(batch_size, *shape, device=device),
        "action": torch.rand(batch_size, DPG_ACTIONS, device=device) * 2 - 1,
        "reward": torch.randn(batch_size, device=device),
        "discount": torch.full((batch_size,), 0.97, device=device),
        "next_obs": torch.randn(batch_size, *shape, device=device),
    }
    batch = DeviceBatch(transitions, torch.ones(batch_size, device=device), None)

    def step() -> None:  # one critic update, and every policy_delay-th a policy update
        algorithm.step(batch)
        if device.type == "cuda":
            torch.cuda.synchronize()

    return measure_rate("updates", "updates/s", step, warmup_calls=20, **timing).to_record()


def _measure_impala(shape, hidden, batch_size: int, device: torch.device, timing: dict) -> dict:
    from apex.algorithms.impala.learner import Impala
    from apex.algorithms.impala.settings import ImpalaSettings
    from launch.config import resolve

    config = dataclasses.replace(
        resolve({"env": "CartPole-v1", "algorithm": "impala"}).learner, hidden=hidden
    )
    algorithm = Impala(config, ImpalaSettings(), shape, 6, device)
    steps = UNROLL_LENGTH
    if len(shape) == 3:
        observations = torch.randint(
            0, 256, (batch_size, steps + 1, *shape), dtype=torch.uint8, device=device
        )
    else:
        observations = torch.randn(batch_size, steps + 1, *shape, device=device)
    unrolls = {
        "obs": observations,
        "action": torch.randint(0, 6, (batch_size, steps), device=device),
        "reward": torch.randn(batch_size, steps, device=device),
        "discount": torch.full((batch_size, steps), 0.99, device=device),
        "log_prob": torch.full((batch_size, steps), -1.8, device=device),
        "version": torch.zeros(batch_size, dtype=torch.int64, device=device),
    }
    batch = DeviceBatch(unrolls, torch.ones(batch_size, device=device), None)
    return _update_rate(algorithm, batch, device, 3 if len(shape) == 3 else 20, timing)


def _r2d2_settings(network: str):
    from launch.config import resolve

    if network == "r2d2-mlp":  # the popgym preset's, read without making its env
        run = resolve({"env": "popgym:popgym-RepeatFirstEasy-v0", "algorithm": "r2d2"}, sized=False)
        return run.learner, run.algorithms["r2d2"]
    run = resolve({"env": "CartPole-v1", "algorithm": "r2d2"}, sized=False)
    return run.learner, R2D2Settings()  # R2D2's own defaults: sequences of 80, an LSTM of 512


def _steps_per_item(network: str) -> int:
    if network.startswith("impala"):
        return UNROLL_LENGTH
    if network.startswith("r2d2"):
        return _r2d2_settings(network)[1].sequence_length
    return 1


def _measure_r2d2(
    network: str, shape, hidden, batch_size: int, device: torch.device, timing: dict
) -> dict:
    from apex.algorithms.r2d2.learning import R2D2
    from apex.algorithms.r2d2.network import RecurrentQNetwork

    config, settings = _r2d2_settings(network)
    config = dataclasses.replace(config, hidden=hidden)
    actions = 6
    online = RecurrentQNetwork(shape, actions, hidden, settings.lstm_units)
    algorithm = R2D2(config, settings, online, device)
    steps, units = settings.sequence_length, settings.lstm_units
    if len(shape) == 3:
        observations = torch.randint(
            0, 256, (batch_size, steps + 1, *shape), dtype=torch.uint8, device=device
        )
    else:
        observations = torch.randn(batch_size, steps + 1, *shape, device=device)
    generator = torch.Generator().manual_seed(0)
    sequences = {
        "obs": observations,
        "action": torch.randint(0, actions, (batch_size, steps), device=device),
        "reward": torch.randn(batch_size, steps, device=device),
        "discount": torch.full((batch_size, steps), 0.99, device=device),
        "mask": torch.ones(batch_size, steps, device=device),
        "state": torch.randn(batch_size, 2, units, device=device),
        "burn_in_state": torch.randn(batch_size, 2, units, device=device),
        "starts": (torch.rand(batch_size, generator=generator) < 0.2).float().to(device),
    }
    batch = DeviceBatch(sequences, torch.ones(batch_size, device=device), None)
    return _update_rate(algorithm, batch, device, 2 if len(shape) == 3 else 10, timing)


def _update_rate(algorithm, batch, device: torch.device, warmup: int, timing: dict) -> dict:
    """Updates/s of ``algorithm.step`` on one batch already on the device."""

    def step() -> None:
        algorithm.step(batch)
        if device.type == "cuda":
            torch.cuda.synchronize()

    return measure_rate("updates", "updates/s", step, warmup_calls=warmup, **timing).to_record()


def _measure(
    network: str, shape, hidden, batch_size: int, device: torch.device, timing: dict
) -> dict:
    if network.startswith("r2d2"):
        return _measure_r2d2(network, shape, hidden, batch_size, device, timing)
    if network in ("ddpg-mlp", "td3-mlp"):
        return _measure_dpg(network, shape, hidden, batch_size, device, timing)
    if network.startswith("impala"):
        return _measure_impala(shape, hidden, batch_size, device, timing)
    batch = _batch(shape, batch_size, device)
    weights = torch.ones(batch_size, device=device)
    graphed = network.endswith("-graph")
    if graphed:  # as the learner runs it on CUDA
        config = LearnerConfig(hidden=hidden, learning_rate=1e-4, max_grad_norm=10.0)
        algorithm = DoubleDQN(config, DQNSettings(), shape, 6, device)
        update = functools.partial(algorithm.step, DeviceBatch(batch, weights, None))
    else:
        online = build_network(shape, 6, hidden).to(device)
        optimizer = adam(online.parameters(), 1e-4, 1.5e-4)
        update = functools.partial(
            dqn_step, online, copy.deepcopy(online), optimizer, batch, weights, 10.0, 1e-3
        )

    def step() -> None:
        update()
        if device.type == "cuda":
            torch.cuda.synchronize()

    # The graph's eager updates and its capture are not timed.
    warmup = 3 if len(shape) == 3 and not graphed else 20
    record = measure_rate("updates", "updates/s", step, warmup_calls=warmup, **timing).to_record()
    if graphed:
        record["graph_replays"] = algorithm.graphed.replays  # 0: not captured (logged)
    return record


def _phase_records(base: dict, params: dict, phases: dict[str, float]) -> list[dict]:
    return [
        {
            **base,
            "case": f"{base['case']}-phase",
            "metric": phase,
            "unit": "ms/update",
            "median": ms,
            "min": ms,
            "max": ms,
            "repeats": 1,
            "params": params,
        }
        for phase, ms in phases.items()
    ]


def _scaled(updates: dict, batch_size: int) -> dict:
    """Transitions/s from the same timing: updates/s times the batch size."""
    return {
        **updates,
        "metric": "samples",
        "unit": "transitions/s",
        "median": updates["median"] * batch_size,
        "min": updates["min"] * batch_size,
        "max": updates["max"] * batch_size,
    }
