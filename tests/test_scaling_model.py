"""The scaling model (``bench.scaling.scaling_model``): a point's env steps/s is the least
of what the actors, the machine's cores and the learner allow; the knee is where the
actors' line meets the lesser of the others; unit costs come from two calibration windows;
a cluster table counts nodes until the learner binds. The calibration runs themselves are
a benchmark (``apex bench model --scaling``), never a timed test."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from bench.scaling import scaling_model, scaling_units
from bench.scaling.scaling_model import ScalingUnits
from bench.scaling.scaling_tasks import TASKS

UNITS = ScalingUnits(
    task="cartpole-sleep5ms",
    cores=2,
    batch=64,
    samples_per_insert=2.0,
    publish_period=20,
    env_wall_s=0.005,
    env_cpu_s=0.000_1,
    actor_cpu_s=0.000_15,
    learner_update_s=0.002,
    shard_step_s=0.0,
    publication_s=0.0,
)


def test_few_actors_are_bound_by_their_env_steps_and_many_by_the_machine() -> None:
    # An actor: 1 / (5 ms + 0.15 ms) = 194 steps/s; the machine: 2 cores over 0.25 ms
    # + 2/64 of 2 ms = 0.3125 ms a step = 6,400 steps/s; the learner: 500 updates/s of
    # 64 at 2 samples an insert = 16,000 steps/s.
    one = scaling_model.predict(UNITS, 1)
    assert one["env_steps_per_s"] == pytest.approx(1 / 0.005_15)
    assert one["bound_by"] == "env steps"
    assert one["updates_per_s"] == pytest.approx(one["env_steps_per_s"] / 32)
    many = scaling_model.predict(UNITS, 64)
    assert many["env_steps_per_s"] == pytest.approx(6_400.0)
    assert many["bound_by"] == "the machine's cores"
    assert many["limits"]["the learner"] == pytest.approx(16_000.0)
    knee = scaling_model.knee(UNITS, counts=(1, 2, 4, 8, 16, 32, 64))
    assert knee["bound_by"] == "the machine's cores" and knee["actors"] == 64
    assert knee["meets_at"] == pytest.approx(6_400.0 * 0.005_15)


def test_each_actor_process_pays_for_its_copy_of_the_weights() -> None:
    # 1 ms a copy, every 20 updates, to 64 processes: 3.2 ms more an update, 0.1 ms more
    # a step at 2/64 of an update a step.
    units = dataclasses.replace(UNITS, publication_s=0.001)
    assert units.per_step_cpu_s(64) == pytest.approx(UNITS.per_step_cpu_s(64) + 0.000_1)
    assert units.per_step_cpu_s(1) < units.per_step_cpu_s(64)
    assert scaling_model.predict(units, 64)["env_steps_per_s"] == pytest.approx(2 / 0.000_412_5)


def test_a_learner_slower_than_the_machine_binds_first() -> None:
    units = dataclasses.replace(UNITS, learner_update_s=0.02, cores=64)
    knee = scaling_model.knee(units, counts=(1, 4, 16))
    assert knee["bound_by"] == "the learner" and knee["actors"] == 16
    assert knee["env_steps_per_s"] == pytest.approx(50 * 32)
    assert scaling_model.predict(units, 1_000)["bound_by"] == "the learner"
    assert scaling_model.knee(units, counts=(1, 4))["actors"] is None


def test_points_are_checked_within_a_quarter_and_name_what_the_model_says_binds() -> None:
    config = {
        "points": [
            {"actors": 1, "env_steps_per_s": 186.0, "bound_by": "env steps (...)"},
            {"actors": 64, "env_steps_per_s": 4_000.0, "bound_by": "the learner (...)"},
            {"actors": 128, "env_steps_per_s": None},  # no rate measured: not checked
        ]
    }
    checks = scaling_model.check_points(UNITS, config, "record.json")
    assert [c["actors"] for c in checks] == [1, 64]
    assert checks[0]["within"] and checks[0]["bound_by"] == "env steps"
    assert not checks[1]["within"] and checks[1]["error"] == pytest.approx(0.6)
    assert checks[1]["measured_bound_by"] == "the learner (...)"


def test_unit_costs_come_from_a_window_whose_learner_was_busy() -> None:
    window = {
        "env_steps_per_s": 10_000.0,
        "updates_per_s": 400.0,
        "learner_cores": 0.96,
        "shard_cores": 0.2,
        "actor_cores": 0.5,
    }
    units = scaling_units.units_from(
        TASKS["cartpole-sleep5ms"], window, (0.0052, 0.0001), 1e-5, 2e-4
    )
    assert units.learner_update_s == pytest.approx(0.0024)
    assert units.shard_step_s == pytest.approx(2e-5)
    assert units.actor_cpu_s == pytest.approx(4e-5)  # 50 µs a step, 10 µs of it the env's
    assert (units.env_wall_s, units.env_cpu_s, units.publication_s) == (0.0052, 0.0001, 2e-4)
    assert (units.batch, units.samples_per_insert, units.publish_period) == (64, 2.0, 20)


def test_the_cluster_table_counts_nodes_until_the_learner_binds() -> None:
    # 1 ms of actor CPU a step: a 16-core node makes 16,000 steps/s; a learner of 100
    # updates of 512 at 0.8 sampled per inserted wants 64,000.
    rows = scaling_model.cluster_table(0.001, 100.0, 512, 0.8, node_cores=(16, 64))
    assert rows[0]["nodes_until_learner_binds"] == 4
    assert rows[0]["speedup_there"] == pytest.approx(4.0)
    assert rows[1]["nodes_until_learner_binds"] == 1
    assert rows[1]["speedup_there"] == pytest.approx(1.0)


def test_the_step_cost_is_measured_on_the_tasks_env() -> None:
    wall, cpu = scaling_units.env_step_costs(TASKS["cartpole-cpu1ms"], steps=20, repeats=1)
    assert wall >= 0.001 and cpu >= 0.001  # a busy-wait spends its cost on this CPU
    wall, cpu = scaling_units.env_step_costs(TASKS["cartpole-sleep5ms"], steps=20, repeats=1)
    assert wall >= 0.005 and cpu < 0.004  # a sleep spends its cost on no CPU


def test_a_publication_is_costed_for_every_actor_process() -> None:
    cost = scaling_units.publication_cost("CartPole-v1", subscribers=2, publications=5)
    assert 0.0 < cost < 0.1


def test_among_many_processes_the_measured_actor_and_learner_costs_count() -> None:
    crowded = dataclasses.replace(UNITS, crowd={"64": [0.000_4, 250.0]})
    assert crowded.per_step_cpu_s(1) == UNITS.per_step_cpu_s(1)  # not measured: alone
    # an actor's 0.4 ms a step (its env's in it) + 2/64 of the learner's 2 ms
    assert crowded.per_step_cpu_s(64) == pytest.approx(0.000_462_5)
    assert crowded.learner_steps(64) == pytest.approx(250.0 * 32)
    assert crowded.learner_steps(1) == pytest.approx(500.0 * 32)


def _crowd_processes() -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            count += (
                entry.name.isdigit() and b"bench.scaling.crowd" in (entry / "cmdline").read_bytes()
            )
        except OSError:
            continue  # ended while listed
    return count


@pytest.mark.slow
def test_a_crowd_is_measured_on_a_real_run_beside_bare_steppers() -> None:
    actor_step_s, updates = scaling_units.crowd_costs(
        TASKS["cartpole-sleep5ms"], 3, seconds=3.0, env_wall_s=0.0055
    )
    assert 0.0 < actor_step_s < 0.005 and updates > 0.0
    assert _crowd_processes() == 0  # the crowd and its forked steppers are gone


def test_pongs_cluster_table_uses_its_actor_cost_and_the_cuda_learners_rates() -> None:
    from bench.system.cost_model import UnitCosts
    from bench.system.model_suite import pong_cluster

    fields = {f.name: 0.0 for f in dataclasses.fields(UnitCosts)}
    # 1 ms a vector step of 4 envs + 0.5 ms an env step: 0.75 ms, 1.2x on a packed node.
    costs = UnitCosts(
        **{
            **fields,
            "env": "Pong",
            "transitions_per_message": 64,
            "weights_bytes": 0,
            "per_vector_step_s": 0.001,
            "per_env_step_s": 0.0005,
            "actor_shared_factor": 1.2,
        }
    )
    rows = pong_cluster(costs)
    assert {row["learner"] for row in rows} == set(scaling_model.CUDA_LEARNER_RATES)
    sixteen = next(r for r in rows if r["node_cores"] == 16 and r["learner_updates_per_s"] == 278)
    assert sixteen["actor_step_s"] == pytest.approx(0.0009)
    assert sixteen["env_steps_per_s_per_node"] == pytest.approx(16 / 0.0009)
    assert sixteen["replay_ratio"] == pytest.approx(scaling_model.PAPER_REPLAY_RATIO)
    wanted = 278 * 512 / scaling_model.PAPER_REPLAY_RATIO
    assert sixteen["nodes_until_learner_binds"] == math.ceil(wanted / (16 / 0.0009))
