"""What holds a run back (``launch.views.binding``): the rule from the records' own
figures, over a run and at one moment, and where the views say it."""

from __future__ import annotations

import pytest

from launch.views.binding import evaluator_behind, progress_binding, run_binding, what_binds


@pytest.mark.parametrize(
    ("figures", "part"),
    [
        ({"inserts_held": 0.8, "samples_waited": 0.0}, "learner"),
        ({"inserts_held": 0.8, "samples_waited": 0.0, "shard_cores": [0.3, 0.95]}, "shard"),
        ({"inserts_held": 0.1, "samples_waited": 0.9}, "env steps"),
        (
            {"inserts_held": 0.1, "samples_waited": 0.9, "machine_busy_cores": 1.9, "cores": 2},
            "machine",
        ),
        (
            {"inserts_held": 0.6, "samples_waited": 0.0, "machine_busy_cores": 1.9, "cores": 2},
            "learner",
        ),
        ({"inserts_held": 0.3, "samples_waited": 0.3}, None),
    ],
)
def test_the_rule_names_the_side_that_waits_most(figures: dict, part: str | None) -> None:
    binding = what_binds(**figures)
    assert (binding.part if binding else None) == part


def test_a_learner_on_a_busy_machine_says_so_and_what_would_move_it() -> None:
    binding = what_binds(inserts_held=0.75, samples_waited=0.0, machine_busy_cores=1.95, cores=2)
    assert binding.line() == (
        "learner (the rate limiter held the actors' inserts 75% of the time; all 2 of this "
        "machine's cores busy): a faster learner (learner.device = cuda), a larger "
        "learner.batch_size or a lower replay.samples_per_insert; more actors add nothing"
    )


def record(updates: int, held: bool, waiting: int, cpu_s: float, uptime_s: float) -> dict:
    shard = {
        "inserts_waiting": held,
        "samples_waiting": waiting,
        "cpu_s": cpu_s,
        "uptime_s": uptime_s,
    }
    return {"event": "progress", "updates": updates, "shards": [shard]}


def test_over_a_run_the_shares_of_its_training_records_decide() -> None:
    records = [record(0, True, 0, 0.0, 1.0)]  # before training: not counted
    records += [record(10 * i, i % 4 != 0, 0, 0.2 * i, 1.0 + i) for i in range(1, 9)]
    binding = run_binding(records)
    assert binding.part == "learner" and "75% of the time" in binding.evidence
    assert run_binding(records[:1]) is None
    hot = [record(10 * i, True, 0, 0.95 * i, 1.0 + i) for i in range(1, 5)]
    assert run_binding(hot).part == "shard"
    assert progress_binding(record(5, False, 3, 1.0, 2.0)).part == "env steps"
    assert progress_binding(record(0, False, 3, 1.0, 2.0)) is None  # not training yet


def test_an_evaluator_behind_by_five_cadence_points_is_named() -> None:
    assert evaluator_behind(20_000, 12_000, 2_000) is None
    behind = evaluator_behind(22_000, 12_000, 2_000)
    assert (
        behind.part == "evaluator" and "10,000 env steps behind, 5 cadence points" in behind.line()
    )
    assert evaluator_behind(22_000, None, 2_000) is None and evaluator_behind(1, 0, 0) is None


def test_status_and_the_live_line_name_what_binds(tmp_path) -> None:
    from apex.learning.metrics import MetricsWriter
    from launch.views.live_view import plain_line
    from launch.views.status import run_status, status_lines
    from launch.views.watch import RunWatch
    from tests.conftest import write_run_dir

    write_run_dir(tmp_path)
    metrics = MetricsWriter(tmp_path)
    for i in range(1, 4):
        metrics.write(
            {
                **record(100 * i, True, 0, 0.1 * i, 10.0 * i),
                "time_s": 30.0 + i,
                "env_steps": 40_000 + 1000 * i,
                "updates_per_s": 10.0,
            }
        )
    metrics.close()
    lines = "\n".join(status_lines(run_status(tmp_path)))
    assert "bound by learner (the rate limiter held the actors' inserts 100% of the time)" in lines
    watch = RunWatch(tmp_path)
    watch.poll()
    line = plain_line(watch, 35.0)
    # The newest evaluation (env steps unknown in this run dir) cannot be behind.
    assert line.endswith(
        "| bound by learner (the rate limiter held the actors' inserts 100% of "
        "the time): a faster learner (learner.device = cuda), a larger "
        "learner.batch_size or a lower replay.samples_per_insert; more actors "
        "add nothing"
    )
