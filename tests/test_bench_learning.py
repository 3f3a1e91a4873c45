"""The learning benchmarks' commands, quick: ``apex bench solve`` (time to solve, apex
beside SB3) and ``apex bench race`` (curves beside SB3 for a fixed time). Schema, plots and
the rules for unsolved runs, never speed. Apart from tests/test_bench_cli.py so that the
test workers share the benchmark runs out evenly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import report
from launch.cli import main


@pytest.mark.slow
def test_quick_solve_benchmark_runs_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "solve.json"
    result = CliRunner().invoke(
        main, ["bench", "solve", "--quick", "--max-seconds", "8", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    by_implementation = {
        r["implementation"]: r for r in document["records"] if r.get("metric") == "time_to_solve"
    }
    assert set(by_implementation) == {"apex", "sb3-dqn"}  # CartPole: SB3 DQN
    for record in by_implementation.values():
        run = record["params"]["runs"][0]
        assert run["seconds"] > 0 and isinstance(run["solved"], bool)
        assert record["unsolved"] == (not run["solved"])
    both_solved = all(r["unsolved"] == 0 for r in by_implementation.values())
    assert bool(document["ratios"]) == both_solved  # no ratio from an unsolved run
    if not both_solved:
        assert "not solved (1 of 1 seeds)" in report.markdown(document)


def test_an_unsolved_time_is_marked_in_the_table_and_the_plot(tmp_path: Path) -> None:
    from bench import plots

    record = {
        "suite": "solve", "case": "CartPole-v1", "implementation": "apex", "status": "ok",
        "metric": "time_to_solve", "unit": "s", "median": 11.0, "min": 11.0, "max": 11.0,
        "repeats": 1, "unsolved": 1, "params": {},
    }  # fmt: skip
    document = {
        "created_utc": "now", "machine": {"cpu": "cpu", "cores": 2}, "git": {},
        "command": "apex bench solve --quick", "suites": ["solve"], "records": [record],
        "ratios": [],
    }  # fmt: skip
    assert "not solved (1 of 1 seeds): ≥ 11" in report.markdown(document)
    [png] = plots.plot_document(document, tmp_path)
    assert png.stat().st_size > 0


@pytest.mark.slow
def test_a_short_race_gives_both_curves_and_a_plot(tmp_path: Path) -> None:
    out, png = tmp_path / "race.json", tmp_path / "race.png"
    arguments = ["bench", "race", "--env", "Pendulum-v1", "--minutes", "0.2", "--json", str(out),
                 "--plot", str(png)]  # fmt: skip
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []  # returns are signed figures
    last = {r["implementation"]: r for r in document["records"] if r.get("metric") == "last_eval"}
    assert set(last) == {"apex", "sb3-td3"}
    for record in last.values():
        assert record["params"]["curve"] and record["median"] < 0  # Pendulum's returns
    assert png.stat().st_size > 10_000
    assert "apex ahead at the end:" in result.output
