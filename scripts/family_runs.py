"""Runs ``apex train --env ENV --max-time SECONDS`` for each env named, one after another,
and writes what each did to a JSON record: its exit code, updates, evaluations, the last
greedy return and how it ended. It shows that each env of a family starts, trains,
evaluates and ends cleanly on the family's settings; it measures no speed.

    .venv/bin/python scripts/family_runs.py --json OUT.json --max-time 60 \\
        --set learner.eval_every_steps=20000 ALE/Breakout-v5 Seaquest MinAtar/Asterix-v1 ...

``--set`` settings go to every run (a family's own evaluation cadence, 250K env steps for
Atari, would see no evaluation in a minute on a CPU).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def run_one(env: str, max_time_s: float, root: Path, settings: list[str]) -> dict:
    run_dir = root / env.replace("/", "_")
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        "--env",
        env,
        "--max-time",
        str(max_time_s),
        "--run-dir",
        str(run_dir),
        "--plain",
        "--no-curves",
    ]
    for setting in settings:
        command += ["--set", setting]
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=max_time_s + 600,
        check=False,
    )
    records = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line]
    end = next((r for r in reversed(records) if r.get("event") == "end"), {})
    evaluations = [r for r in records if r.get("event") == "evaluation"]
    return {
        "env": env,
        "exit_code": done.returncode,
        "wall_s": round(time.monotonic() - started, 1),
        "reason": end.get("reason"),
        "updates": end.get("updates"),
        "transitions_added": end.get("transitions_added"),
        "evaluations": len(evaluations),
        "last_eval_return": evaluations[-1]["eval_return_mean"] if evaluations else None,
        "transitions_lost": end.get("delivery", {}).get("transitions_lost"),
        "stderr_tail": done.stderr[-600:] if done.returncode else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("envs", nargs="+")
    parser.add_argument("--max-time", type=float, default=60.0)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    options = parser.parse_args()
    from bench.machine import git_commit

    document = {
        "command": " ".join(sys.argv),
        "git": git_commit(REPOSITORY),
        "max_time_s": options.max_time,
        "settings": options.set,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="family-runs-") as root:
        for env in options.envs:
            document["runs"].append(run_one(env, options.max_time, Path(root), options.set))
            options.json.write_text(json.dumps(document, indent=1) + "\n")
            print(json.dumps(document["runs"][-1]), flush=True)


if __name__ == "__main__":
    main()
