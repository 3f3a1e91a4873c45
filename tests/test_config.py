"""Run configs: every problem reported at once, each section validating itself, presets
living with their environments; and the builder that turns a config into parts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from apex.algorithms.dqn.settings import DQNSettings
from apex.envs.families import env_shape
from apex.envs.presets import PRESETS
from apex.learning.staging import uses_io_thread
from apex.settings import ActorConfig, LearnerConfig
from launch.builder import read_spec, shard_config, write_spec
from launch.config import ConfigError, ReplayConfig, resolve
from launch.slurm_config import SlurmConfig
from tests.conftest import SMALL_SPEC


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"actors": 0}, "actors must be a positive integer, got 0"),
        (
            {"replay": {"capacity": 100, "min_size": 200}},
            "replay.min_size=200 must be in [1, capacity=100]",
        ),
        (
            {"learner": {"batch_size": 512}, "replay": {"min_size": 100}, "shards": 2},
            "replay.min_size 100 < learner.batch_size 512",
        ),
        ({"actor": {"hidden": [64]}}, "actor.hidden (64,) and learner.hidden"),
        ({"learner": {"device": "tpu"}}, "learner.device must be auto, cpu or cuda"),
        ({"learner": {"replay_io": "async"}}, "learner.replay_io must be one of auto, thread"),
        ({"learner": {"no_such_key": 1}}, "learner: unknown setting 'no_such_key'"),
        ({"colour": "blue"}, "unknown top-level setting 'colour'"),
        ({"actor": {"gamma": 1.5}}, "actor.gamma must be in [0, 1], got 1.5"),
    ],
)
def test_bad_configs_are_refused_with_every_problem(values, expected) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve(values)
    assert any(expected in problem for problem in raised.value.problems), raised.value.problems


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(ConfigError) as raised:
        resolve({"actors": 0, "shards": -1, "actor": {"epsilon": 2.0}})
    assert len(raised.value.problems) >= 3


def test_the_replay_io_mode_follows_the_device() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not uses_io_thread("auto", cpu) and uses_io_thread("auto", cuda)
    assert uses_io_thread("thread", cpu) and not uses_io_thread("inline", cuda)


def test_the_default_config_is_valid_and_cartpole() -> None:
    config = resolve({})
    assert config.env == "CartPole-v1"
    assert config.actor.hidden == config.learner.hidden


def test_replay_totals_are_split_over_the_shards() -> None:
    config = resolve(
        {
            "shards": 3,
            "replay": {"capacity": 1000, "min_size": 100, "error_buffer": 600.0},
        }
    )
    shards = [shard_config(config, index, "127.0.0.1") for index in range(3)]
    assert {shard.capacity for shard in shards} == {334}
    assert {shard.min_size for shard in shards} == {34}
    assert {shard.error_buffer for shard in shards} == {200.0}
    # Every shard together holds at least the totals asked for.
    assert sum(shard.min_size for shard in shards) >= config.replay.min_size
    assert sum(shard.capacity for shard in shards) >= config.replay.capacity


@pytest.mark.slow
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"actor": {"max_in_flight": 8}}, "actor.max_in_flight was renamed to actor.insert_credit"),
        ({"replay": {"samples_per_insert": -1.0}}, "replay.samples_per_insert must be finite"),
        (
            {"replay": {"samples_per_insert": 2.0, "error_buffer": -5.0}},
            "replay.error_buffer must be finite and >= 0",
        ),
        ({"learner": {"max_time_s": 0}}, "learner.max_time_s must be > 0"),
        ({"actor": {"insert_credit": 0}}, "actor.insert_credit must be a positive integer"),
        ({"actor": {"env_threads": 0}}, "actor.env_threads must be a positive integer"),
        ({"actor": {"acting_precision": "int4"}}, "actor.acting_precision must be one of"),
        ({"learner": {"eval_every_steps": -1}}, "learner.eval_every_steps must be an integer"),
        ({"learner": {"confirm_episodes": 1.5}}, "learner.confirm_episodes must be an integer"),
        ({"learner": {"stop_when_solved": 1}}, "learner.stop_when_solved must be true or false"),
    ],
)
def test_more_bad_configs(values, expected) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve(values)
    assert any(expected in problem for problem in raised.value.problems), raised.value.problems


def test_each_section_validates_itself() -> None:
    assert ActorConfig().problems() == [] and LearnerConfig().problems() == []
    assert ReplayConfig().problems() == []
    assert ActorConfig(gamma=2.0, n_step=0).problems(prefix="") == [
        "n_step must be a positive integer, got 0",
        "gamma must be in [0, 1], got 2.0",
    ]
    assert LearnerConfig(batch_size=True).problems()[0].startswith("learner.batch_size")
    assert DQNSettings(cuda_graph="yes").problems() == [
        "dqn.cuda_graph must be true or false, got 'yes'"
    ]
    assert ReplayConfig(capacity=10, min_size=20).problems() == [
        "replay.min_size=20 must be in [1, capacity=10]: a shard never holds more than its "
        "capacity, so it would never sample"
    ]
    assert SlurmConfig(actor_nodes=2).problems(actors=3, shards=1) == [
        "actors 3 do not divide over slurm.actor_nodes 2"
    ]


def test_presets_carry_their_defaults_and_the_user_wins() -> None:
    pong = resolve({"env": "Pong"})
    assert pong.replay.capacity == PRESETS["Pong"].defaults["replay"]["capacity"]
    assert pong.actors == PRESETS["Pong"].defaults["actors"]
    mine = resolve({"env": "Pong", "replay": {"capacity": 40_000}})
    assert mine.replay.capacity == 40_000
    assert mine.replay.min_size == PRESETS["Pong"].defaults["replay"]["min_size"]


def test_the_spec_is_saved_once_and_read_back(tmp_path: Path) -> None:
    assert read_spec(tmp_path) is None
    write_spec(tmp_path, SMALL_SPEC)
    assert read_spec(tmp_path) == SMALL_SPEC
    (tmp_path / "spec.json").write_text('{"obs": [[4], "object"]}')
    with pytest.raises(ConfigError, match="is not a transition spec"):
        read_spec(tmp_path)
    (tmp_path / "spec.json").write_text("[1, 2")
    with pytest.raises(ConfigError, match="is not a transition spec"):
        read_spec(tmp_path)


def test_a_shard_built_from_a_saved_spec_never_builds_the_env() -> None:
    # No such environment exists: only the handed spec can make this shard.
    config = resolve({"env": "NoSuchEnvironment-v0"})
    shard = shard_config(config, 1, "127.0.0.1", spec=SMALL_SPEC)
    assert shard.spec == SMALL_SPEC and shard.shard_index == 1 and shard.problems() == []
    assert shard.seed == config.seed + 200
    assert (
        shard_config(resolve({}), 0, "127.0.0.1").spec == env_shape("CartPole-v1").transition_spec()
    )


def test_a_retired_setting_is_dropped_with_a_notice(caplog) -> None:
    """A run directory written before evaluations followed env steps still resumes."""
    config = resolve({"learner": {"eval_interval_s": 1.5, "eval_every_steps": 3000}})
    assert config.learner.eval_every_steps == 3000
    assert "learner.eval_interval_s is no longer read" in caplog.text
    assert "eval_interval_s" not in config.to_dict()["learner"]


def test_an_algorithm_s_settings_for_one_env_sit_over_its_own_and_under_the_user_s() -> None:
    impala = resolve({"env": "CartPole-v1", "algorithm": "impala"})
    assert (impala.learner.batch_size, impala.learner.learning_rate) == (8, 4e-4)
    assert impala.replay.capacity == 1024  # IMPALA's own, for any env
    lander = resolve({"env": "LunarLander-v3", "algorithm": "impala"})
    lander_impala = lander.algorithms["impala"]
    assert (lander.actor.reward_scale, lander_impala.entropy_cost) == (0.01, 0.001)
    assert resolve({"env": "LunarLander-v3"}).actor.reward_scale == 1.0  # DQN's: its own
    elsewhere = resolve({"env": "Acrobot-v1", "algorithm": "impala"})
    assert elsewhere.learner.batch_size == 32
    mine = resolve({"env": "CartPole-v1", "algorithm": "impala", "learner": {"batch_size": 16}})
    assert mine.learner.batch_size == 16


LOCKSTEP = {
    "algorithm": "impala",
    "actor": {"lockstep": True},
    "learner": {"publish_period": 1},
    "replay": {"min_size": 8, "replay_share": 0.0},
}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"algorithm": "dqn"}, "actor.lockstep is for an algorithm whose replay is a queue"),
        ({"shards": 2}, "actor.lockstep needs shards = 1, got 2"),
        ({"learner": {"publish_period": 10}}, "needs learner.publish_period = 1, got 10"),
        (
            {"actor": {"lockstep": True, "refresh_versions": 5}},
            "needs actor.refresh_versions = 1, got 5",
        ),
        (
            {"replay": {"min_size": 32, "replay_share": 0.0}},
            "a round is 8 unrolls (actors × actor.envs_per_actor), less than the 32 the learner "
            "waits for",
        ),
    ],
)
def test_lockstep_runs_that_could_wait_forever_are_refused(change, expected) -> None:
    # CartPole's IMPALA: one actor of 8 envs, batches of 8 unrolls.
    config = resolve(LOCKSTEP)
    assert config.actor.lockstep and config.actors * config.actor.envs_per_actor == 8
    with pytest.raises(ConfigError) as raised:
        resolve({**LOCKSTEP, **change})
    assert any(expected in problem for problem in raised.value.problems), raised.value.problems


def test_lockstep_refuses_a_replay_share_its_preset_s_too() -> None:
    """Lock-step trains on the learner's own policy; a replayed unroll is older. IMPALA's
    CartPole preset replays half of each batch: lock-step must turn it off by name."""
    without = {**LOCKSTEP, "replay": {"min_size": 8}}
    with pytest.raises(ConfigError) as raised:
        resolve(without)
    assert any(
        "replay.replay_share 0.5 would replay older unrolls: set replay.replay_share=0" in problem
        for problem in raised.value.problems
    )
    assert resolve(LOCKSTEP).replay.replay_share == 0.0


def test_a_config_of_before_still_sets_cuda_graph_where_it_now_lives() -> None:
    config = resolve({"learner": {"cuda_graph": False}})
    assert config.algorithms["dqn"].cuda_graph is False
