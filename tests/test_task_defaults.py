"""A vector env with no preset settings starts from settings sized to its episode limit
(``apex.envs.task_defaults``), under whatever the run's algorithm, file and overrides
set; envs with presets, images and other algorithms' learners keep their own."""

from __future__ import annotations

import pytest

from apex.envs.families import solved_return
from apex.envs.task_defaults import vector_defaults
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
    settings = vector_defaults(limit, dqn=True)
    assert settings["replay"]["capacity"] == capacity
    assert settings["replay"]["min_size"] == min_size
    assert settings["learner"]["eval_every_steps"] == eval_every


def test_a_vector_env_without_a_preset_is_sized_to_its_task() -> None:
    config = resolve({"env": "MountainCar-v0"})  # 200 steps an episode
    assert (config.replay.capacity, config.replay.min_size) == (50_000, 1_000)
    assert config.learner.batch_size == 128 and config.learner.eval_every_steps == 2_000
    assert config.algorithms["dqn"].target_update_period == 250 and config.actors == 1
    # The file and the command line still have the last word.
    config = resolve({"env": "MountainCar-v0", "replay": {"min_size": 5_000}},
                     {"learner": {"batch_size": 64}})  # fmt: skip
    assert config.replay.min_size == 5_000 and config.learner.batch_size == 64
    # A user's factory with no episode limit of its own: 1,000 steps are assumed.
    made = resolve({"env": {"id": "grid", "make": "examples.grid_world:make"}})
    assert (made.replay.capacity, made.replay.min_size) == (200_000, 2_000)


def test_another_algorithm_keeps_its_own_learner_and_queue() -> None:
    impala = resolve({"env": "MountainCar-v0", "algorithm": "impala"})
    assert impala.learner.batch_size == 32 and impala.replay.capacity == 1024
    assert impala.actors == 1 and impala.learner.eval_every_steps == 2_000
    dpg = resolve({"env": "MountainCarContinuous-v0"})  # 999 steps an episode
    assert dpg.replay.min_size == 1_998 and dpg.replay.samples_per_insert is None
    unsized = resolve({"env": "MountainCarContinuous-v0"}, sized=False)
    assert dpg.learner.batch_size == unsized.learner.batch_size


def test_presets_and_images_keep_their_settings() -> None:
    assert resolve({"env": "CartPole-v1"}).replay.capacity == 100_000  # its preset's
    assert resolve({"env": "CartPole-v1"}).learner.batch_size == 64
    image = resolve({"env": "tests.space_envs:Pixels-v0"})  # the run-wide defaults
    assert (image.replay.min_size, image.learner.batch_size, image.actors) == (50_000, 512, 2)


def test_a_named_env_runs_on_its_family_s_defaults_by_its_own_preset() -> None:
    """``[preset] family = "gymnasium"`` (``--set preset.family=gymnasium``) sets the
    built-in preset aside: the family's sized settings, gymnasium's threshold."""
    config = resolve({"env": "CartPole-v1", "preset": {"family": "gymnasium"}})
    assert (config.replay.capacity, config.replay.min_size) == (100_000, 1_000)
    assert config.learner.batch_size == 128 and config.actor.n_step == 3
    assert solved_return("CartPole-v1", None) == 475.0
    # The next config without the table has the built-in preset again.
    assert resolve({"env": "CartPole-v1"}).learner.batch_size == 64
