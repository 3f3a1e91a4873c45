"""``apex bench arms``: arms of one environment from learning records made apart, on the
committed POPGym RepeatFirstEasy records (R2D2 with its RecurrentPPO peer; DQN on stacks)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import report
from bench.learning import arms
from launch.cli import main

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
R2D2 = RESULTS / "learn-popgym-repeatfirst-r2d2-2026-12-04.json"
DQN_STACK4 = RESULTS / "learn-popgym-repeatfirst-dqn-stack4-2026-12-04.json"
R2D2_WHOLE = RESULTS / "learn-popgym-repeatfirst-r2d2-2026-12-04.full.json.gz"
DQN_STACK4_WHOLE = RESULTS / "learn-popgym-repeatfirst-dqn-stack4-2026-12-04.full.json.gz"


def _gathered(*paths: Path) -> list[arms.Arm]:
    return arms.gather([(str(p), arms.read_record(p)) for p in paths])


def test_each_side_of_each_record_is_an_arm_named_by_its_algorithm_or_peer() -> None:
    found = _gathered(R2D2, DQN_STACK4)
    assert [a.label for a in found] == ["r2d2", "sb3-recurrent-ppo", "dqn-stack4"]
    source = json.loads(R2D2.read_text())
    mine = next(
        r
        for r in source["records"]
        if r["implementation"] == "apex" and r["metric"] == "return_at_60s"
    )
    assert found[0].figures["return_at_60s"]["iqm"] == mine["iqm"]
    assert found[0].runs is None  # summarised: no curves
    assert arms.subject(found[0].task) == "popgym-RepeatFirstEasy"


def test_the_reference_is_compared_at_every_figure_both_arms_have() -> None:
    outcome = arms.result(_gathered(R2D2, DQN_STACK4))
    against_peer = [c for c in outcome["comparisons"] if c["other"] == "sb3-recurrent-ppo"]
    against_stack = [c for c in outcome["comparisons"] if c["other"] == "dqn-stack4"]
    # The peer's first evaluation came after 30 s: no figure there to compare.
    assert [c["metric"] for c in against_peer] == [
        "return_at_60s",
        "return_at_120s",
        "return_at_300s",
    ]
    assert len(against_stack) == 4
    for c in against_peer + against_stack:
        # Every R2D2 seed returned more than every DQN-on-stacks and PPO seed here.
        assert c["reference_ahead"] and not c["intervals_overlap"]
        assert c["probability_of_improvement"] == 1.0 and c["difference"] > 0
        assert "ratio" not in c  # the others' returns are negative: no ratio
    # Reversed, the same figures say the reference is behind.
    reversed_outcome = arms.result(_gathered(DQN_STACK4, R2D2))
    behind = [c for c in reversed_outcome["comparisons"] if c["other"] == "r2d2"]
    assert behind and all(not c["reference_ahead"] and c["difference"] < 0 for c in behind)
    assert all(c["probability_of_improvement"] == 0.0 for c in behind)


def _time_arm(label: str, values: list[float], ci: tuple[float, float]) -> arms.Arm:
    figure = {
        "metric": "time_to_confirmed_solve",
        "unit": "s",
        "iqm": sum(values) / len(values),
        "ci_low": ci[0],
        "ci_high": ci[1],
        "higher_is_better": False,
        "params": {"values": values},
    }
    task = {"env": "CartPole-v1", "name": None, "budget_s": 60.0}
    return arms.Arm(label, "made here", {}, task, {figure["metric"]: figure}, None)


def test_for_times_the_faster_arm_is_better_and_the_ratio_is_the_other_over_it() -> None:
    fast = _time_arm("fast", [2.0, 3.0], (2.0, 3.0))
    slow = _time_arm("slow", [8.0, 12.0], (8.0, 12.0))
    (comparison,) = arms.compare(fast, slow)
    assert comparison["difference"] == pytest.approx(7.5)
    assert comparison["ratio"] == pytest.approx(4.0)
    assert comparison["reference_ahead"] and comparison["probability_of_improvement"] == 1.0


@pytest.mark.slow
def test_the_command_writes_a_valid_record_and_one_plot_from_whole_records(tmp_path) -> None:
    out, png = tmp_path / "arms.json", tmp_path / "arms.png"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "arms",
            str(R2D2_WHOLE),
            str(DQN_STACK4_WHOLE),
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| return_at_60s | 0.987 [0.924, 1]" in result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    assert {r["implementation"] for r in document["records"]} == {
        "r2d2",
        "sb3-recurrent-ppo",
        "dqn-stack4",
    }
    assert len(document["suites"]["arms"]["comparisons"]) == 7
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ((R2D2, DQN_STACK4, "--plot", "unused.png"), "give its whole record"),
        ((R2D2, R2D2), "more than one arm named r2d2"),
        ((R2D2, RESULTS / "learn-breakout-2026-11-24.json"), "different environments"),
        ((R2D2, RESULTS / "shard-sequences-2026-12-02.json"), "not a learning record"),
    ],
)
def test_records_that_cannot_be_compared_are_refused_with_the_reason(paths, message, tmp_path):
    arguments = [str(tmp_path / p) if p == "unused.png" else str(p) for p in paths]
    result = CliRunner().invoke(main, ["bench", "arms", *arguments])
    assert result.exit_code == 1
    assert message in result.output


def test_a_corrupted_or_truncated_record_is_refused_not_raised(tmp_path) -> None:
    whole = R2D2_WHOLE.read_bytes()
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(gzip.compress(b"{}")[:5])
    for path in (truncated, garbage):
        result = CliRunner().invoke(main, ["bench", "arms", str(path), str(DQN_STACK4)])
        assert result.exit_code == 1
        assert "not a readable JSON record" in result.output
