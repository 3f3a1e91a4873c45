"""The `apex` CLI and the replay benchmark's quick mode: schema and sanity, never speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import report
from launch.cli import main


def test_help_lists_the_roles_and_tools() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "bench" in result.output
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert "replay" in result.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["bench", "replay", "--repeats", "0"], "--repeats"),
        (["bench", "replay", "--impl", "reverb"], "--impl"),
        (["bench", "replay", "--peer-python", "torchrl"], "is not NAME=PATH"),
        (["bench", "replay", "--peer-python", "torchrl=/no/such/python"], "does not exist"),
        (["bench", "nosuchsuite"], "No such command"),
    ],
)
def test_bad_options_are_refused_with_a_clear_message(arguments, message) -> None:
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.slow
def test_quick_replay_benchmark_writes_a_valid_document(tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    markdown = tmp_path / "replay.md"
    arguments = ["bench", "replay", "--quick", "--repeats", "2", "--seconds", "0.02"]
    arguments += ["--impl", "apex", "--impl", "cpprb", "--impl", "torchrl"]
    arguments += ["--json", str(out), "--markdown", str(markdown)]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    ok = [r for r in document["records"] if r["status"] == "ok"]
    measured = {(r["case"], r["implementation"], r["metric"]) for r in ok}
    for case in ("small-2^12", "atari-2^8"):
        for implementation in ("apex", "cpprb"):
            for metric in ("insert", "sample", "update", "loop"):
                assert (case, implementation, metric) in measured
    assert all(r["repeats"] == 2 and r["median"] > 0 for r in ok)
    apex_over_cpprb = [
        r for r in document["ratios"] if (r["numerator"], r["denominator"]) == ("apex", "cpprb")
    ]
    assert len(apex_over_cpprb) == 8
    # torchrl either ran or says why it could not; it is never silently missing.
    torchrl = [r for r in document["records"] if r["implementation"] == "torchrl"]
    assert torchrl and all(r["status"] == "ok" or r["reason"] for r in torchrl)
    assert document["git"]["commit"] is None or len(document["git"]["commit"]) == 40
    assert "| small-2^12 | sample |" in markdown.read_text()


def test_validation_catches_broken_documents() -> None:
    document = {"schema": "apex-bench/1", "machine": {}, "packages": {}, "git": {}, "suites": {}}
    document["records"] = [
        {
            "suite": "replay",
            "case": "c",
            "implementation": "x",
            "status": "ok",
            "params": {},
            "metric": "sample",
            "unit": "batches/s",
            "median": 5.0,
            "min": 6.0,
            "max": 7.0,
            "repeats": 3,
        },
        {
            "suite": "replay",
            "case": "c",
            "implementation": "y",
            "status": "unavailable",
            "params": {},
        },
    ]
    document["ratios"] = [{"ratio": -1.0}]
    problems = report.validate(document)
    assert any("not in range and ordered" in p for p in problems)
    assert any("missing ['reason']" in p for p in problems)
    assert any("ratio 0" in p for p in problems)


@pytest.mark.slow
def test_quick_shard_benchmark_writes_a_valid_document(tmp_path: Path) -> None:
    out = tmp_path / "shard.json"
    arguments = ["bench", "shard", "--quick", "--repeats", "2", "--seconds", "0.1"]
    result = CliRunner().invoke(main, [*arguments, "--ingest-rate", "20000", "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    measured = {(r["case"], r["implementation"], r["metric"]) for r in document["records"]}
    for kind in ("small", "atari"):
        for implementation in ("apex", "raw-pyzmq"):
            assert (f"ingest-{kind}-1p", implementation, "ingest") in measured
    for shards in (1, 2):
        assert (f"sample-{shards}shard", "apex", "ready_batches") in measured
    ingest_ratios = [r for r in document["ratios"] if r["metric"] == "ingest"]
    assert len(ingest_ratios) == 2 and all(r["ratio"] > 0 for r in ingest_ratios)


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
    assert set(by_implementation) == {"apex", "sb3-dqn"}
    for record in by_implementation.values():
        run = record["params"]["runs"][0]
        assert run["seconds"] > 0 and isinstance(run["solved"], bool)
