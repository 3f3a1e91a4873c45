"""Shared fixtures and reference helpers for the test suite."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import zmq

from launch.supervision.role_process import RoleProcess, RoleStartError
from launch.supervision.role_process import stop_all as stop_roles
from replay import TransitionSpec
from replay.inserts.endpoints import ShardEndpoints
from replay.protocol.requests import RequestClient

SMALL_SPEC = TransitionSpec.from_dict(
    {
        "obs": ((4,), "float32"),
        "action": ((), "int64"),
        "reward": ((), "float32"),
        "discount": ((), "float32"),
        "next_obs": ((4,), "float32"),
    }
)


@pytest.fixture(autouse=True)
def denormals_as_ieee_says():
    """A role run in-process (``apex learner`` through click's runner) flushes denormals
    to zero for the whole process (``apex.algorithms.cpu_math``); the tests after it, and
    hypothesis's float strategies, need the default back."""
    yield
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_flush_denormal(False)


def make_batch(spec: TransitionSpec, count: int, first_id: int = 0) -> dict[str, np.ndarray]:
    """A batch whose every field encodes the item's id, so any slot can be traced back."""
    ids = np.arange(first_id, first_id + count)
    batch = {}
    for name, field in spec.items():
        shape = (count, *field.shape)
        values = np.broadcast_to(ids.reshape((count,) + (1,) * len(field.shape)), shape)
        batch[name] = np.ascontiguousarray(values).astype(field.dtype)
    return batch


def chi2_critical(dof: int, significance: float) -> float:
    """Upper critical value of the chi-square distribution (Wilson-Hilferty; its relative
    error is below 1% for dof >= 10, far smaller than the margins the tests rely on)."""
    z = {1e-2: 2.3263, 1e-3: 3.0902, 1e-4: 3.7190}[significance]
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * math.sqrt(h)) ** 3


@pytest.fixture
def small_spec() -> TransitionSpec:
    return SMALL_SPEC


START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def wait_for(
    condition: Callable[[], object],
    timeout_s: float = 10.0,
    what: str = "condition",
    interval_s: float = 0.0,
):
    """Polls ``condition`` until it is truthy or the deadline passes. Most conditions here
    are an INFO round trip to a shard, which paces the loop by itself; others pass
    ``interval_s`` to pause between polls."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if interval_s:
            pause.wait(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def write_run_dir(run_dir: Path, updates: int = 1200, train_seconds: float = 30.0) -> None:
    """A run directory as a run leaves it: config (a 25 s limit), a checkpoint, metrics
    (start, two evaluations, progress, end)."""
    from apex.learning import checkpoint
    from apex.learning.metrics import MetricsWriter
    from launch.config import resolve, write_resolved

    write_resolved(resolve({}, {"learner": {"max_time_s": 25.0}}), run_dir)
    counters = {
        "updates": updates,
        "weight_version": 40,
        "transitions_trained": 9,
        "train_seconds": train_seconds,
        "episodes_seen": 3,
    }
    checkpoint.save(
        run_dir / "checkpoints", updates, {"online": {}, "counters": json.dumps(counters)}
    )
    metrics = MetricsWriter(run_dir)
    metrics.write(
        {"event": "start", "updates": 0, "device": "cpu", "actor_processes": 2, "ape_x_actors": 16}
    )
    for time_s, mean in ((10.0, 150.0), (20.0, 402.5)):
        metrics.write(
            {
                "event": "evaluation",
                "time_s": time_s,
                "updates": updates // 2,
                "eval_return_mean": mean,
                "eval_return_min": 9.0,
                "eval_return_max": 500.0,
            }
        )
    metrics.write(
        {
            "event": "progress",
            "time_s": 29.5,
            "updates": updates,
            "updates_per_s": 41.3,
            "transitions_per_s": 1234.5,
            "transitions_added": 45678,
            "replay_sizes": [45678],
            "episode_return_mean": 123.456789,
            "policy_lag_median": 2.0,
            "shards_alive": 1,
        }
    )
    metrics.write(
        {
            "event": "end",
            "reason": "max_time",
            "solved": False,
            "updates": updates,
            "train_seconds": train_seconds,
            "checkpoints_failed": 1,
        }
    )
    metrics.close()


class ShardProcess:
    """A real ``apex replay`` process (``launch.supervision.role_process.RoleProcess``),
    ready to use: its endpoints are read from its ready line."""

    def __init__(self, *arguments: str, wait: bool = True) -> None:
        self.role = RoleProcess.apex("replay", *arguments, name="shard")
        self.process = self.role.process
        if wait:
            self.await_ready()

    def await_ready(self) -> None:
        try:
            ready = self.role.await_ready(START_TIMEOUT_S)
        except RoleStartError as exc:
            self.role.stop(STOP_TIMEOUT_S)
            self.role.close()
            raise AssertionError(str(exc)) from None
        self.endpoints = ShardEndpoints(ready["insert"], ready["request"])

    @classmethod
    def start_all(cls, *argument_lists: Sequence[str]) -> list[ShardProcess]:
        """Shards started at once, then each awaited: each spends seconds importing numba
        and torch, which one after another cost a three-shard fixture 5-10 s."""
        shards = [cls(*arguments, wait=False) for arguments in argument_lists]
        try:
            for shard in shards:
                shard.await_ready()
        except BaseException:
            stop_roles([shard.role for shard in shards], STOP_TIMEOUT_S)
            raise
        return shards

    def stop(self) -> int:
        """Stops it (SIGTERM); its exit code. A shard that needs SIGKILL fails the test."""
        return ShardProcess.stop_all([self])[0]

    @staticmethod
    def stop_all(shards: Sequence[ShardProcess]) -> list[int]:
        """Stops them all at once (SIGTERM each, then waits); their exit codes."""
        killed = stop_roles([shard.role for shard in shards], STOP_TIMEOUT_S)
        assert not killed, f"{len(killed)} shard(s) did not stop on SIGTERM in time"
        return [shard.process.returncode for shard in shards]


@pytest.fixture(scope="module")
def shard() -> Iterator[ShardProcess]:
    process = ShardProcess("--capacity", "64", "--seed", "1")
    yield process
    assert process.stop() == 0


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def info(context: zmq.Context, shard: ShardProcess) -> dict:
    """One INFO round trip to ``shard``."""
    client = RequestClient(context, shard.endpoints.request, sender=99)
    try:
        return client.info()
    finally:
        client.close()
