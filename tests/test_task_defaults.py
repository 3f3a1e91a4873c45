"""A task without preset settings starts from the one rule of
``apex.algorithms.sized_defaults``: sizes from its episode limit, then its algorithm's
``[sized.KIND]`` tables by the kind of its observations; Atari-sized images on a CUDA
learner keep the papers' settings; presets, the run's file and ``--set`` go over it; and
``apex train --explain`` says what chose each value."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from apex.algorithms.registry import ALGORITHMS
from apex.algorithms.sized_defaults import observation_kind, rule
from apex.envs.families import solved_return
from launch.cli import main
from launch.config import resolve


@pytest.mark.parametrize(
    ("limit", "capacity", "min_size", "eval_every"),
    [
        (200, 50_000, 1_000, 2_000),
        (500, 100_000, 1_000, 5_000),
        (1_000, 200_000, 2_000, 10_000),
        (None, 200_000, 2_000, 10_000),
        (10_000, 1_000_000, 20_000, 50_000),
        (100_000, 1_000_000, 50_000, 50_000),
    ],
)
def test_the_sizes_follow_the_episode_limit_within_their_bounds(
    limit, capacity, min_size, eval_every
) -> None:
    settings = rule("dqn", "vector", limit, cuda=False).settings
    assert settings["replay"]["capacity"] == capacity
    assert settings["replay"]["min_size"] == min_size
    assert settings["learner"]["eval_every_steps"] == eval_every


def test_the_kind_of_observation_is_the_built_in_network_s() -> None:
    assert observation_kind((8,)) == "vector"
    assert observation_kind((12, 12, 1)) == "small_image"
    assert observation_kind((4, 84, 84)) == "image"
    assert observation_kind((2, 2)) == "vector"  # a user's network takes it; sized as one


def test_every_algorithm_has_settings_for_every_kind_it_learns_on_a_cpu() -> None:
    """Each algorithm's own tables: vectors for all, small images for the ones with a
    convolutional torso, each rule naming its file for every value it takes from it."""
    for builder in ALGORITHMS:
        kinds = ("vector",) if builder.continuous else ("vector", "small_image")
        for kind in kinds:
            sized = rule(builder.name, kind, 100, cuda=False)
            assert builder.defaults.sized[kind], (builder.name, kind)
            assert any(why.startswith(f"{builder.name}/defaults.toml") for *_, why in sized.reasons)
            assert sized.settings["actors"] == 1


def test_only_an_atari_sized_image_on_cuda_keeps_the_papers_settings() -> None:
    assert rule("dqn", "image", 1_000, cuda=True).settings == {}
    assert "the papers' settings" in rule("dqn", "image", 1_000, cuda=True).said
    on_a_cpu = rule("dqn", "image", 1_000, cuda=False).settings
    assert on_a_cpu["replay"]["min_size"] == 2_000 and on_a_cpu["actors"] == 1
    assert rule("dqn", "small_image", 1_000, cuda=True).settings["learner"]["batch_size"] == 128


def test_a_vector_env_without_a_preset_is_sized_to_its_task() -> None:
    config = resolve({"env": "MountainCar-v0"})  # 200 steps an episode
    assert (config.replay.capacity, config.replay.min_size) == (50_000, 1_000)
    assert config.learner.batch_size == 128 and config.learner.eval_every_steps == 2_000
    assert config.algorithms["dqn"].target_update_period == 250 and config.actors == 1
    # The file and the command line still have the last word.
    config = resolve(
        {"env": "MountainCar-v0", "replay": {"min_size": 5_000}}, {"learner": {"batch_size": 64}}
    )
    assert config.replay.min_size == 5_000 and config.learner.batch_size == 64
    # A user's factory with no episode limit of its own: 1,000 steps are assumed.
    made = resolve({"env": {"id": "grid", "make": "examples.grid_world:make"}})
    assert (made.replay.capacity, made.replay.min_size) == (200_000, 2_000)


def test_each_algorithm_takes_its_own_tables_over_its_run_wide_defaults() -> None:
    impala = resolve({"env": "MountainCar-v0", "algorithm": "impala"})
    assert impala.learner.batch_size == 8 and impala.replay.capacity == 1024  # a queue
    assert impala.actors == 1 and impala.learner.eval_every_steps == 2_000
    r2d2 = resolve({"env": "MountainCar-v0", "algorithm": "r2d2"})
    assert (r2d2.replay.capacity, r2d2.replay.min_size) == (100_000, 500)  # sequences
    assert r2d2.algorithms["r2d2"].lstm_units == 64 and r2d2.learner.batch_size == 32
    dpg = resolve({"env": "MountainCarContinuous-v0"})  # 999 steps an episode
    assert dpg.replay.min_size == 1_998 and dpg.replay.samples_per_insert == 64.0
    assert dpg.learner.batch_size == 256 and dpg.actor.envs_per_actor == 4
    image = resolve({"env": "tests.space_envs:Pixels-v0"})  # 12x12: a small image
    assert (image.learner.batch_size, image.learner.learning_rate) == (128, 2.5e-4)


def test_a_preset_s_settings_for_the_algorithm_go_over_the_rule() -> None:
    popgym = resolve({"env": "popgym:popgym-RepeatPreviousEasy-v0", "algorithm": "r2d2"})
    assert popgym.actor.reward_scale == 48.0  # the preset's own
    assert popgym.algorithms["r2d2"].sequence_length == 20


def test_presets_keep_their_settings() -> None:
    assert resolve({"env": "CartPole-v1"}).replay.capacity == 100_000  # its preset's
    assert resolve({"env": "CartPole-v1"}).learner.batch_size == 64


def test_a_named_env_runs_on_its_family_s_defaults_by_its_own_preset() -> None:
    """``[preset] family = "gymnasium"`` (``--set preset.family=gymnasium``) sets the
    built-in preset aside: the family's sized settings, gymnasium's threshold."""
    config = resolve({"env": "CartPole-v1", "preset": {"family": "gymnasium"}})
    assert (config.replay.capacity, config.replay.min_size) == (100_000, 1_000)
    assert config.learner.batch_size == 128 and config.actor.n_step == 3
    assert solved_return("CartPole-v1", None) == 475.0
    # The next config without the table has the built-in preset again.
    assert resolve({"env": "CartPole-v1"}).learner.batch_size == 64


def test_explain_says_what_chose_each_value_and_what_replaced_it() -> None:
    arguments = ["train", "--env", "MountainCar-v0", "--set", "learner.batch_size=64", "--explain"]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("defaults: DQN on a vector task of 200-step episodes, CPU learner")
    assert any(
        "replay.capacity = 50_000" in line and "200 episodes of 200 steps" in line for line in lines
    )
    assert any(
        "dqn.target_update_period = 250" in line and "dqn/defaults.toml" in line for line in lines
    )
    assert "  learner.batch_size = 64 (the rule's: 128)" in lines
    preset = CliRunner().invoke(main, ["train", "--explain"])
    assert preset.exit_code == 0 and "CartPole-v1's preset" in preset.output
