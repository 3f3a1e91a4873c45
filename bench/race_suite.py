"""Race suite: `apex train` and stable-baselines3 TD3 (rl-zoo settings) each given the same
wall-clock budget on one continuous-control env, their greedy evaluation curves against
wall-clock time side by side in one PNG.

The sides run one after the other, never together, so neither takes the other's cores.
Time runs from spawning each process, start-up included. Both evaluate greedily on the
preset's number of episodes: apex every ``learner.eval_interval_s``, the baseline every
``eval_every_steps`` env steps. The figures are each side's last and best evaluation
mean; "ahead at the end" compares the last ones.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from apex.envs import preset
from apex.metrics import read_metrics
from bench.solve_suite import run_sb3_worker
from bench.workers import REPO_ROOT, worker_env

SUITE = "race"
ENVS = ("HalfCheetah-v5", "Hopper-v5", "Pendulum-v1", "LunarLanderContinuous-v3")


def _run_apex(env: str, seed: int, seconds: float, eval_interval_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="apex-race-") as directory:
        run_dir = Path(directory) / "run"
        command = [
            sys.executable, "-m", "launch", "train", "--env", env, "--seed", str(seed),
            "--max-time", str(seconds), "--target-return", "1e18", "--run-dir", str(run_dir),
            "--plain", "--set", f"learner.eval_interval_s={eval_interval_s}",
        ]  # fmt: skip
        started = time.time()
        completed = subprocess.run(command, cwd=REPO_ROOT, env=worker_env(), capture_output=True,
                                   text=True, timeout=seconds + 600, check=False)  # fmt: skip
        if completed.returncode != 0:
            return {"error": f"apex train exited {completed.returncode}: {completed.stdout[-300:]}"}
        records = read_metrics(run_dir)
        curve = [[r["unix_s"] - started, None, r["eval_return_mean"]] for r in records
                 if r.get("event") == "evaluation"]  # fmt: skip
        progress = [r for r in records if r.get("event") == "progress"]
        steps = progress[-1]["transitions_added"] if progress else None
        return {"curve": curve, "env_steps": steps, "seconds": time.time() - started}


def _run_sb3(env: str, seed: int, seconds: float, eval_every_steps: int) -> dict:
    request = {
        "env": env, "seed": seed, "max_seconds": seconds, "max_steps": 10**8,
        "eval_every_steps": eval_every_steps, "target_return": 1e18, "torch_threads": 2,
        "eval_episodes": preset(env).defaults.get("learner", {}).get("eval_episodes", 20),
    }  # fmt: skip
    result = run_sb3_worker(request, seconds + 600)
    if "error" in result:
        return result
    return {"curve": result["curve"], "env_steps": result["steps"], "seconds": result["seconds"]}


def _records(env: str, implementation: str, run: dict, params: dict) -> list[dict]:
    base = {"suite": SUITE, "case": env, "implementation": implementation}
    if "error" in run or not run["curve"]:
        reason = run.get("error", "no evaluation within the budget")
        return [{**base, "status": "unavailable", "reason": reason, "params": params}]
    means = [point[2] for point in run["curve"]]
    detail = {**params, **run}
    return [
        {**base, "status": "ok", "metric": metric, "unit": "return", "median": value,
         "min": value, "max": value, "repeats": 1, "params": detail}
        for metric, value in (("last_eval", means[-1]), ("best_eval", max(means)))
    ]  # fmt: skip


def run(
    *,
    env: str = "HalfCheetah-v5",
    seconds: float = 1800.0,
    seed: int = 0,
    eval_interval_s: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Both sides for ``seconds`` each on ``env``; records, and the curves in params."""
    if env not in ENVS:
        raise ValueError(f"no race for {env!r}: one of {', '.join(ENVS)}")
    interval = eval_interval_s or max(seconds / 30, 5.0)
    params = {"seconds": seconds, "seed": seed, "eval_interval_s": interval}
    records = []
    for implementation, runner in (
        ("apex", lambda: _run_apex(env, seed, seconds, interval)),
        ("sb3-td3", lambda: _run_sb3(env, seed, seconds, 5000 if "v5" in env else 2000)),
    ):
        if progress:
            progress(f"race {env} {implementation} for {seconds:.0f} s")
        records += _records(env, implementation, runner(), params)
    last = {r["implementation"]: r["median"] for r in records if r.get("metric") == "last_eval"}
    return {
        "records": records,
        "ratios": [],  # returns may be negative: a ratio of them means nothing
        "config": {"env": env, **params, "apex_ahead_at_end": (
            last["apex"] > last["sb3-td3"] if {"apex", "sb3-td3"} <= last.keys() else None)},
    }  # fmt: skip


def plot_race(document: dict, out: Path) -> Path:
    """Both sides' evaluation curves against wall-clock time, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 5))
    # The env from the records (their case), so a saved record plots as the fresh one does.
    env = ""
    for record in document["records"]:
        if record.get("metric") != "last_eval":
            continue
        env = record["case"]
        curve = record["params"]["curve"]
        axis.plot([p[0] / 60 for p in curve], [p[2] for p in curve], marker="o", markersize=3,
                  label=f"{record['implementation']} (last {record['median']:.0f})")  # fmt: skip
    target = preset(env).solved_return
    if target is not None:
        axis.axhline(target, color="black", linestyle=":", linewidth=1, label=f"target {target:g}")
    axis.set(
        xlabel="wall-clock minutes from start (start-up included)",
        ylabel="greedy evaluation mean",
        title=f"{env}: apex (Ape-X DPG) vs SB3 TD3 (rl-zoo)",
    )
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out
