"""Replay-core suite: this project's prioritized replay beside cpprb and torchrl.

Each (case, implementation) of a full run has a worker process of its own
(``bench.parts.replay_worker``), one after another, so they never compete for the two cores or
for memory; a quick run gives each implementation one worker for all its tiny cases, and
pays each peer's imports once. A peer that cannot run (not installed, or torchrl whose
compiled extension does not load beside the installed torch) is reported as
``unavailable`` with the reason, never silently dropped; such a peer can be pointed at an
interpreter of its own with ``peer_python``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from bench.workers import REPO_ROOT, worker_env

SUITE = "replay"
IMPLEMENTATIONS = ("apex", "apex-fresh", "cpprb", "torchrl")
# Rows of the ratio table: (numerator, denominator).
RATIO_PAIRS = (("apex", "cpprb"), ("apex", "torchrl"), ("apex-fresh", "cpprb"))
# apex-fresh differs from apex only in where samples are gathered to.
METRICS_OF = {"apex-fresh": ("sample", "loop")}
TORCHRL_HINT = (
    "torchrl's compiled extension must match the installed torch; run "
    "`bash bench/peer_env.sh` and pass --peer-python torchrl=.venv-peers/bin/python"
)
# Share of physical memory one store may take, so a case never pushes the machine to swap.
MEMORY_SHARE = 0.4


@dataclass(frozen=True)
class ReplayCase:
    """One store configuration: capacity and the observation field's shape and dtype."""

    name: str
    capacity: int
    obs_shape: tuple[int, ...]
    obs_dtype: str

    @property
    def transition_nbytes(self) -> int:
        obs = int(np.prod(self.obs_shape)) * np.dtype(self.obs_dtype).itemsize
        return 2 * obs + 8 + 4 + 4  # obs, next_obs, action, reward, discount


FULL_CASES = (
    ReplayCase("small-2^20", 1 << 20, (4,), "float32"),
    ReplayCase("small-2^21", 1 << 21, (4,), "float32"),
    ReplayCase("atari-2^17", 1 << 17, (4, 84, 84), "uint8"),
)
QUICK_CASES = (
    ReplayCase("small-2^12", 1 << 12, (4,), "float32"),
    ReplayCase("atari-2^8", 1 << 8, (4, 84, 84), "uint8"),
)


def fit_to_memory(case: ReplayCase, memory_bytes: int | None) -> ReplayCase:
    """Halves the capacity until one store fits in ``MEMORY_SHARE`` of memory."""
    if not memory_bytes:
        return case
    capacity = case.capacity
    while capacity > 1024 and capacity * case.transition_nbytes > MEMORY_SHARE * memory_bytes:
        capacity //= 2
    if capacity == case.capacity:
        return case
    exponent = capacity.bit_length() - 1
    name = case.name.split("-")[0] + f"-2^{exponent}"
    return ReplayCase(name, capacity, case.obs_shape, case.obs_dtype)


def _run_worker(python: str, request: dict, timeout_s: float) -> dict:
    try:
        completed = subprocess.run(
            [python, "-m", "bench.parts.replay_worker", json.dumps(request)],
            cwd=REPO_ROOT,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"worker ran past {timeout_s:.0f} s"}
    except OSError as exc:
        return {"error": f"could not start {python}: {exc}"}
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = (completed.stderr or "").strip().splitlines()[-3:]
        return {"error": f"worker exited {completed.returncode}: {' | '.join(tail)}"}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"worker printed no result: {lines[-1][:200]}"}


def run(
    *,
    quick: bool = False,
    implementations: Sequence[str] = IMPLEMENTATIONS,
    case_names: Sequence[str] | None = None,
    repeats: int = 5,
    seconds_per_repeat: float | None = None,
    batch_size: int = 512,
    insert_batch: int = 50,
    peer_python: dict[str, str] | None = None,
    memory_bytes: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Runs the suite and returns ``{"records": [...], "ratios": [...], "config": {...}}``."""
    cases = [fit_to_memory(case, memory_bytes) for case in (QUICK_CASES if quick else FULL_CASES)]
    if case_names:
        cases = [
            case
            for case in cases
            if case.name.split("-")[0] in case_names or case.name in case_names
        ]
    per_repeat = seconds_per_repeat if seconds_per_repeat is not None else (0.05 if quick else 0.4)
    peer_python = peer_python or {}
    records: list[dict[str, object]] = []
    if quick:
        groups = [(implementation, cases) for implementation in implementations if cases]
    else:
        groups = [(implementation, [case]) for case in cases for implementation in implementations]
    results: dict[tuple[str, str], dict] = {}
    for implementation, group in groups:
        if progress:
            progress(f"replay {'+'.join(c.name for c in group)} {implementation}")
        request = {
            "implementation": implementation,
            "cases": [{**asdict(case), "obs_shape": list(case.obs_shape)} for case in group],
            "batch_size": batch_size,
            "insert_batch": insert_batch,
            "repeats": repeats,
            "seconds_per_repeat": per_repeat,
            "metrics": list(METRICS_OF.get(implementation, ())),
        }
        python = peer_python.get(implementation, sys.executable)
        timeout_s = (120 if quick else 1800) * len(group)
        reply = _run_worker(python, request, timeout_s=timeout_s)
        per_case = reply.get("results") or [reply] * len(group)
        for case, result in zip(group, per_case, strict=False):
            results[(case.name, implementation)] = result
    for case in cases:
        for implementation in implementations:
            result = results.get((case.name, implementation), {"error": "worker gave no result"})
            params = {
                "capacity": case.capacity,
                "obs_shape": list(case.obs_shape),
                "obs_dtype": case.obs_dtype,
                "batch_size": batch_size,
                "insert_batch": insert_batch,
                "alpha": 0.6,
                "beta": 0.4,
                "python": peer_python.get(implementation, sys.executable),
            }
            base = {"suite": SUITE, "case": case.name, "implementation": implementation}
            if "error" in result:
                reason = str(result["error"])
                if implementation == "torchrl" and "available" in reason:
                    reason += f" ({TORCHRL_HINT})"
                records.append(
                    {**base, "status": "unavailable", "reason": reason, "params": params}
                )
                continue
            for record in result["records"]:
                records.append({**base, "status": "ok", **record, "params": params})
    return {
        "records": records,
        "ratios": ratios(records),
        "config": {
            "quick": quick,
            "repeats": repeats,
            "seconds_per_repeat": per_repeat,
            "cases": [asdict(case) for case in cases],
            "implementations": list(implementations),
        },
    }


def ratios(records: list[dict[str, object]]) -> list[dict[str, object]]:
    """Median ratios ``numerator / denominator`` for every case and metric both measured."""
    medians = {
        (r["case"], r["implementation"], r["metric"]): r["median"]
        for r in records
        if r.get("status") == "ok"
    }
    out = []
    for case, implementation, metric in sorted(medians):
        for numerator, denominator in RATIO_PAIRS:
            if implementation != numerator or (case, denominator, metric) not in medians:
                continue
            out.append(
                {
                    "suite": SUITE,
                    "case": case,
                    "metric": metric,
                    "numerator": numerator,
                    "denominator": denominator,
                    "ratio": medians[(case, numerator, metric)]
                    / medians[(case, denominator, metric)],
                }
            )
    return out
