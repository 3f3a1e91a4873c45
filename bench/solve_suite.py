"""Solve suite: wall-clock time to solve an env, `apex train` beside stable-baselines3 with
the rl-zoo's settings: DQN on CartPole-v1 (Ape-X DQN), TD3 on Pendulum-v1 (Ape-X DPG).

Solved means a greedy mean return over 20 episodes at the preset's target (CartPole 475,
Pendulum −200). Each seed of each side runs
as a fresh process, and the time runs from spawning it to the evaluation that solved it,
so process start-up (and, for apex, starting every role) is included. The sides run one
after the other, so neither competes with the other for the two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.workers import REPO_ROOT, worker_env

SUITE = "solve"
# env -> (target return, the stable-baselines3 algorithm it is compared with)
ENVS = {"CartPole-v1": (475.0, "dqn"), "Pendulum-v1": (-200.0, "td3")}


def baseline_name(env: str) -> str:
    return f"sb3-{ENVS[env][1]}"


def _run_apex(env: str, seed: int, max_seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="apex-solve-") as directory:
        run_dir = Path(directory) / "run"
        command = [
            sys.executable, "-m", "launch", "train", "--env", env, "--seed", str(seed),
            "--max-time", str(max_seconds), "--run-dir", str(run_dir), "--plain",
        ]  # fmt: skip
        started = time.monotonic()
        completed = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=max_seconds + 300,
            check=False,
        )
        seconds = time.monotonic() - started
        summary_path = run_dir / "summary.json"
        if not summary_path.exists():
            return {"error": f"apex train exited {completed.returncode}: {completed.stdout[-300:]}"}
        summary = json.loads(summary_path.read_text())
        outcome = summary.get("outcome", {})
        return {
            "solved": bool(summary.get("solved")),
            "seconds": seconds,
            "updates": outcome.get("updates"),
            "last_eval": outcome.get("last_eval_return"),
        }


def _run_sb3(env: str, seed: int, max_seconds: float) -> dict:
    request = {
        "env": env, "seed": seed, "max_seconds": max_seconds, "max_steps": 200_000,
        "eval_every_steps": 2000, "target_return": ENVS[env][0], "torch_threads": 2,
    }  # fmt: skip
    return run_sb3_worker(request, max_seconds + 300)


def run_sb3_worker(request: dict, timeout_s: float) -> dict:
    """``bench.sb3_worker`` on ``request`` in its own process: its JSON result, or
    ``{"error": ...}`` saying why there is none."""
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "bench.sb3_worker", json.dumps(request)],
            cwd=REPO_ROOT, env=worker_env(), capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": "stable-baselines3 worker ran past its limit"}
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": f"stable-baselines3 worker exited {completed.returncode}: {tail[0]}"}
    return json.loads(lines[-1])


def _records(case: str, implementation: str, runs: list[dict], params: dict) -> list[dict]:
    base = {"suite": SUITE, "case": case, "implementation": implementation, "params": params}
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        return [{**base, "status": "unavailable", "reason": errors[0]}]
    seconds = [r["seconds"] for r in runs]
    solved = [r for r in runs if r["solved"]]
    detail = {**params, "runs": runs}
    common = {**base, "status": "ok", "params": detail, "repeats": len(runs)}
    return [
        {
            **common,
            "metric": "time_to_solve",
            # An unsolved seed's time is only a lower bound on its time to solve: the
            # record says how many, and no ratio or plain bar is made from it.
            "unsolved": len(runs) - len(solved),
            "unit": "s",
            "median": float(np.median(seconds)),
            "min": min(seconds),
            "max": max(seconds),
        },
        {
            **common,
            "metric": "solved_seeds",
            "unit": "seeds",
            "median": float(len(solved)),
            "min": float(len(solved)),
            "max": float(len(solved)),
        },
    ]


def run(
    *,
    env: str = "CartPole-v1",
    quick: bool = False,
    seeds: Sequence[int] = (0, 1, 2),
    max_seconds: float | None = None,
    implementations: Sequence[str] = ("apex", "sb3"),
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Runs every seed of every implementation ("apex", and "sb3": the env's baseline).
    An unsolved seed counts at its time limit and marks its implementation's time as
    unsolved (``unsolved`` > 0): no ratio is made from it."""
    if env not in ENVS:
        raise ValueError(f"no solve case for {env!r}: one of {', '.join(ENVS)}")
    seeds = tuple(seeds[:1] if quick else seeds)
    limit = max_seconds or (4.0 if quick else 180.0)
    target, _ = ENVS[env]
    params = {"seeds": list(seeds), "max_seconds": limit, "target_return": target,
              "eval_episodes": 20}  # fmt: skip
    baseline = baseline_name(env)
    runners = {"apex": _run_apex, "sb3": _run_sb3}
    records, medians = [], {}  # medians of implementations whose every seed solved
    for implementation in implementations:
        name = "apex" if implementation == "apex" else baseline
        runs = []
        for seed in seeds:
            if progress:
                progress(f"solve {env} {name} seed {seed}")
            runs.append(runners[implementation](env, seed, limit))
        produced = _records(env, name, runs, params)
        records += produced
        for record in produced:
            if record.get("metric") == "time_to_solve" and record["unsolved"] == 0:
                medians[name] = record["median"]
    ratios = []
    if {"apex", baseline} <= medians.keys():
        ratios.append(
            {
                "suite": SUITE, "case": env, "metric": "time_to_solve", "numerator": baseline,
                "denominator": "apex", "ratio": medians[baseline] / medians["apex"],
            }
        )  # fmt: skip
    return {
        "records": records,
        "ratios": ratios,
        "config": {
            "quick": quick,
            "env": env,
            **params,
            "implementations": list(implementations),
        },
    }
