"""The `apex` CLI and the replay benchmark's quick mode: schema and sanity, never speed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import report
from bench.registry import COMMANDS
from launch.cli import main


def test_help_lists_the_roles_and_tools() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "bench" in result.output
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert "replay" in result.output


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_registered_suite_has_a_command_with_help(name: str) -> None:
    """The registry is the CLI's list: each entry resolves to its command, under its name."""
    result = CliRunner().invoke(main, ["bench", name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: main bench {name}" in result.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["bench", "replay", "--repeats", "0"], "--repeats"),
        (["bench", "replay", "--impl", "reverb"], "--impl"),
        (["bench", "replay", "--peer-python", "torchrl"], "is not NAME=PATH"),
        (["bench", "replay", "--peer-python", "torchrl=/no/such/python"], "does not exist"),
        (["bench", "nosuchsuite"], "No such command"),
        (["bench", "learner", "--network", "lstm"], "--network: no lstm; there are mlp"),
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
    # Windows of 0.25 s: in 0.1 s a loaded machine can show no insert at all, and a rate of
    # zero is refused by the report's validation.
    # Small transitions only: whole Atari stacks take their path with bigger arrays, and
    # Pong frames' cases are checked apart (below); each window starts its own processes.
    # One round (the turns are tested apart).
    # R2D2's sequences are checked apart (tests/test_sequence_bench.py).
    parts = ("--part", "ingest", "--part", "sample", "--part", "queue")
    arguments = [
        "bench",
        "shard",
        "--quick",
        "--repeats",
        "1",
        "--seconds",
        "0.25",
        "--curve",
        "--kind",
        "small",
        *parts,
    ]
    result = CliRunner().invoke(main, [*arguments, "--ingest-rate", "20000", "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    measured = {(r["case"], r["implementation"], r["metric"]) for r in document["records"]}
    for implementation in ("apex", "raw-pyzmq", "raw-pyzmq-per-array"):
        assert ("ingest-small-1p", implementation, "ingest") in measured
    for shards in (1, 2):
        assert (f"sample-{shards}shard", "apex", "ready_batches") in measured
    # IMPALA's unrolls through a queue shard to the sampler.
    assert ("queue-unrolls-1shard", "apex", "unrolls") in measured
    ingest_ratios = [
        r for r in document["ratios"] if r["metric"] == "ingest" and r["denominator"] != "apex"
    ]
    # Against both baselines: the same packed bytes, and one frame per array.
    assert len(ingest_ratios) == 2 and all(r["ratio"] > 0 for r in ingest_ratios)
    assert all(len(r["per_round"]) == 1 for r in ingest_ratios)  # a ratio per round
    # CURVE beside plain, in the same run: each kind's ingest and the sample service.
    curve = {r["case"]: r["ratio"] for r in document["ratios"] if r["numerator"] == "apex-curve"}
    assert set(curve) == {"ingest-small-1p-curve", "sample-1shard-curve", "weights-mlp-8sub-curve"}
    assert all(ratio > 0 for ratio in curve.values())


@pytest.mark.slow
def test_the_shard_suite_sends_pong_frames_once_compressed() -> None:
    from bench.parts import shard_suite

    result = shard_suite.run(
        quick=True, repeats=1, seconds_per_repeat=0.25, kinds=("atari-frames",), parts=("ingest",)
    )
    frames = {
        (r["implementation"], r["metric"]): r
        for r in result["records"]
        if r["case"] == "ingest-atari-frames-1p"
    }
    # Each Pong frame sent once, LZ4-compressed: no raw baseline, and far fewer bytes a
    # transition than a whole stack's 56 KB.
    assert frames[("apex", "ingest")]["median"] > 0
    assert frames[("apex", "ingest")]["params"]["transition_nbytes"] < 1000
    assert ("apex-no-credit", "ingest") in frames
    assert not [r for r in result["records"] if r["implementation"].startswith("raw")]


def test_ingest_implementations_take_turns_a_window_each_round(monkeypatch) -> None:
    from bench.parts import shard_suite

    calls = []

    def fake_apex(kind, pushers, timing, capacity, credit=True, shares=None):
        calls.append("apex" if credit else "apex-no-credit")
        return [float(len(calls))] * timing["repeats"]

    def fake_raw(kind, pushers, timing, pack=True):
        calls.append("raw-pyzmq" if pack else "raw-pyzmq-per-array")
        return [float(len(calls))] * timing["repeats"]

    monkeypatch.setattr(shard_suite, "measure_apex", fake_apex)
    monkeypatch.setattr(shard_suite, "measure_raw", fake_raw)
    timing = {"repeats": 3, "seconds_per_repeat": 0.1, "warmup_s": 0.0}
    rates = shard_suite._ingest_rounds("small", 1, timing, 64, [], "case", None)
    names = ["apex", "apex-no-credit", "raw-pyzmq", "raw-pyzmq-per-array"]
    # Every round measures each once, one window each, the order rotated a place a round.
    assert calls == names + names[1:] + names[:1] + names[2:] + names[:2]
    assert {name: len(values) for name, values in rates.items()} == dict.fromkeys(names, 3)
    # Each rate is its own round's: apex's windows came 1st, 8th and 11th.
    assert rates["apex"] == [1.0, 8.0, 11.0]


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["learner", "actor"])
def test_quick_learner_and_actor_suites_write_valid_documents(tmp_path: Path, suite: str) -> None:
    out = tmp_path / f"{suite}.json"
    arguments = ["bench", suite, "--quick", "--repeats", "1", "--json", str(out)]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    ok = [r for r in document["records"] if r["status"] == "ok"]
    rates = [r for r in ok if not r["case"].endswith("-phase")]
    assert rates and all(r["median"] > 0 for r in rates)
    if suite == "learner":
        # Where an update's time goes: each phase of the MLP's at batch 32, none negative.
        phases = {r["metric"]: r["median"] for r in ok if r["case"] == "mlp-cpu-b32-phase"}
        assert set(phases) == {"stage", "forward", "backward", "optimizer", "read back", "total"}
        assert min(phases.values()) >= 0 and phases["forward"] > 0 and phases["total"] > 0
        cases = {r["case"] for r in ok}
        assert {
            "mlp-cpu-b32",
            "mlp-cpu-b512",
            "nature-cnn-cpu-b32",
            "ddpg-mlp-cpu-b256",
            "td3-mlp-cpu-b256",
            "r2d2-mlp-cpu-b32",
        } <= cases
        by_case = {(r["case"], r["metric"]): r["median"] for r in ok}
        assert by_case[("mlp-cpu-b512", "samples")] == pytest.approx(
            512 * by_case[("mlp-cpu-b512", "updates")]
        )
        # A sequence's samples are its steps: 32 sequences of the popgym preset's 20.
        assert by_case[("r2d2-mlp-cpu-b32", "samples")] == pytest.approx(
            32 * 20 * by_case[("r2d2-mlp-cpu-b32", "updates")]
        )
    else:
        assert {
            "CartPole-v1-k1",
            "CartPole-v1-k8",
            "Pendulum-v1-k4",
            "HalfCheetah-v5-k1",
            "Pong-k4-before",
            "Pong-k4-ale-int8",
            "Pong-k4-forward-int8",
            "Pong-k4-play-sync",
            "Pong-k4-play-async",
        } <= {r["case"] for r in ok}
        # Sync and async play, each per core and per process.
        play = {(r["case"], r["metric"]) for r in ok if "-play-" in r["case"]}
        assert ("Pong-k4-play-async", "env_steps_per_process") in play
        assert ("Pong-k4-play-sync", "env_steps") in play
        # Each new Pong loop beside the one actors ran before, in the same run; and two env
        # groups beside one, per core and per process.
        assert {(r["case"], r["metric"], r["denominator"]) for r in document["ratios"]} == {
            ("Pong-k4-ale", "env_steps", "before"),
            ("Pong-k4-ale-int8", "env_steps", "before"),
            ("Pong-k4-ale-int8-halves", "env_steps", "before"),
            ("Pong-k4-ale-int8-halves", "env_steps", "ale-int8"),
            ("Pong-k4-ale-int8-halves", "env_steps_per_process", "ale-int8"),
        }
        int8 = next(r for r in ok if r["case"] == "Pong-k4-forward-int8")
        assert 0.0 <= int8["greedy_agreement"] <= 1.0


def _document(records: list[dict]) -> dict:
    return {"schema": report.SCHEMA, "records": records, "ratios": []}


def _figure(metric: str, unit: str, median: float) -> dict:
    figure = {"suite": "s", "case": "c", "implementation": "apex", "status": "ok"}
    spread = {"median": median, "min": median, "max": median, "repeats": 1}
    return {**figure, "metric": metric, "unit": unit, **spread, "params": {}}


def test_compare_reports_speed_ratios_and_flags_regressions(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    old.write_text(
        json.dumps(
            _document(
                [
                    _figure("rate", "items/s", 100.0),
                    _figure("time", "s", 10.0),
                    _figure("phase", "ms/update", 2.0),
                ]
            )
        )
    )
    new.write_text(
        json.dumps(
            _document(
                [
                    _figure("rate", "items/s", 50.0),
                    _figure("time", "s", 5.0),
                    _figure("phase", "ms/update", 1.0),
                ]
            )
        )
    )
    result = CliRunner().invoke(main, ["bench", "compare", str(old), str(new)])
    assert result.exit_code == 0, result.output
    assert "0.50× ⚠" in result.output  # half the rate: a regression
    assert result.output.count("2.00×") == 2  # half the time, half the ms: twice as fast
    assert "1 regressions" in result.output
    failing = CliRunner().invoke(
        main, ["bench", "compare", str(old), str(new), "--fail-on-regression"]
    )
    assert failing.exit_code == 1
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    refused = CliRunner().invoke(main, ["bench", "compare", str(old), str(broken)])
    assert refused.exit_code == 2 and "not a benchmark JSON file" in refused.output


@pytest.mark.slow
def test_quick_system_suite_measures_a_layout_and_names_its_bottleneck(tmp_path: Path) -> None:
    """One real run of 2 processes × 3 envs: its rates, CPU per role and bottleneck, the
    time from the command to its first update, and memory per actor process."""
    out = tmp_path / "system.json"
    arguments = ["bench", "system", "--quick", "--layout", "2x3", "--json", str(out)]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    records = [r for r in document["records"] if r["status"] == "ok"]
    metrics = {r["metric"]: r for r in records}
    assert metrics["transitions_in"]["median"] > 0 and metrics["updates"]["median"] > 0
    assert {"cpu_learner", "cpu_shard", "cpu_actor"} <= metrics.keys()
    assert metrics["updates"]["params"]["bottleneck"].split()[0] in (
        "machine",
        "learner",
        "shard",
        "actors",
    )
    assert "bottleneck" in result.output
    assert metrics["updates"]["params"]["ape_x_actors"] == 6
    assert 0 < metrics["first_update"]["median"] < 120
    assert len([r for r in records if r["metric"] == "rss_per_actor"]) == 1
    assert metrics["rss_per_actor"]["repeats"] == 2  # one figure per actor process
    assert 30 < metrics["rss_per_actor"]["median"] < 1000  # MB


@pytest.mark.slow
def test_quick_fault_suite_measures_a_recovery_and_writes_a_valid_document(
    tmp_path: Path,
) -> None:
    """The suite end to end, on one fault: a full disk as root (a tmpfs, what CI runs), a
    killed actor otherwise. Each role's recovery is proved once where it is cheapest
    (tests/test_train.py kills each role; tests/test_sampler.py stops a shard)."""
    out = tmp_path / "faults.json"
    fault = "full-disk" if os.geteuid() == 0 else "kill-actor"
    arguments = ["bench", "faults", "--quick", "--fault", fault, "--json", str(out)]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    figures = {(r["case"], r["metric"]): r.get("median") for r in document["records"]}
    assert figures[(fault, "recovered")] == 1, document["records"]
    params = next(r["params"] for r in document["records"] if r["case"] == fault)
    assert figures[(fault, "transitions_lost")] == 0, params["lost_by_actor"]
    if fault == "kill-actor":
        assert 0 < figures[(fault, "recovery_s")] < 60
        return
    # Checkpoints, snapshots and metrics failed while the disk was full; training did not.
    failed = [
        figures[(fault, m)] for m in ("checkpoints_failed", "snapshots_failed", "metrics_dropped")
    ]
    assert sum(failed) >= 1 and figures[(fault, "updates_while_full")] > 0


def test_a_fleet_worker_that_gives_no_report_is_named_with_its_exit_and_log(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys
    from types import SimpleNamespace

    from bench.system.fleet_suite import _why_failed

    (tmp_path / "fleet-128.log").write_text("Traceback\nOSError: no recording\n")
    script = "import sys; sys.exit(3)"
    worker = subprocess.Popen([sys.executable, "-c", script, json.dumps({"first_sender": 128})])
    worker.wait(30)
    why = _why_failed(SimpleNamespace(run_dir=tmp_path), worker, [])
    assert why == "worker of senders 128+: exit 3, 0 lines; Traceback | OSError: no recording"
