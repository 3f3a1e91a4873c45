"""Frame storage only where frames are proven: a 3-D observation that is not a stack is
stored whole and comes back equal; asking for frames on it is refused in one line, by the
launcher before any process starts and by an actor on its first steps."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import zmq

from apex.acting.experience import ExperienceMaker
from apex.acting.frame_check import FrameStackCheck, NotFrameStacks, prove_frame_stacks
from apex.acting.frame_writer import FrameWriter
from apex.algorithms.registry import build_acting, default_sections
from apex.envs.families import env_shape, make_env
from apex.settings import ActorConfig
from launch.builder import shard_config
from launch.config import resolve
from launch.preflight import frame_problems
from replay.inserts.client import InsertClient
from replay.protocol.requests import RequestClient
from tests.conftest import wait_for
from tests.test_served_integrity import ServingShard

GRID = "tests.grid_env:Grid-v0"


def stacked(frames: list[np.ndarray], k: int = 4) -> np.ndarray:
    return np.stack([frames[max(0, len(frames) - k + i)] for i in range(k)])


def test_a_real_stack_passes_and_a_fake_one_is_refused_in_one_line() -> None:
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (6, 5), dtype=np.uint8)]
    check = FrameStackCheck("Stacks-v0", steps=3)
    for _ in range(3):
        before = stacked(frames)
        frames.append(rng.integers(0, 256, (6, 5), dtype=np.uint8))
        check.step(before[None], stacked(frames)[None], np.array([False]))
    assert check.done
    fake = FrameStackCheck("Planes-v0")
    planes = rng.integers(0, 2, (2, 10, 10, 4), dtype=np.uint8)
    with pytest.raises(NotFrameStacks) as refused:
        fake.step(planes, np.roll(planes, 1, axis=2), np.array([False, False]))
    message = str(refused.value)
    assert "\n" not in message and message.startswith("Planes-v0: frame storage needs")
    assert "env 0's observation after step 1" in message and "replay.frames = false" in message


def test_an_ended_episode_is_not_taken_for_a_broken_stack() -> None:
    check = FrameStackCheck("Stacks-v0", steps=1)
    obs = np.zeros((1, 4, 6, 5), np.uint8)
    check.step(obs, np.ones_like(obs), np.array([True]))  # a final observation: not compared


def test_a_user_grid_is_stored_whole_and_comes_back_equal() -> None:
    config = resolve({"env": GRID})
    shard = shard_config(config, 0, "127.0.0.1")
    assert shard.frames is None and shard.spec["obs"].shape == (10, 10, 4)
    env = make_env(GRID, training=True)
    observations = [env.reset(seed=1)[0]]
    for action in [0, 1, 0, 1, 1, 0, 2, 3]:
        observations.append(env.step(action)[0])
    count = len(observations) - 1
    batch = {
        "obs": np.stack(observations[:-1]),
        "action": np.arange(count, dtype=np.int64),
        "reward": np.zeros(count, np.float32),
        "discount": np.full(count, 0.99, np.float32),
        "next_obs": np.stack(observations[1:]),
    }
    serving = ServingShard(dataclasses.replace(shard, min_size=1))
    context = zmq.Context()
    client = InsertClient(context, [serving.endpoints], sender=1, spec=shard.spec, timeout_s=5)
    requests = RequestClient(context, serving.endpoints.request, sender=2, timeout_s=5)
    try:
        client.insert(batch, np.ones(count))
        assert client.flush(10)
        wait_for(lambda: requests.info()["transitions_added"] == count, what="stored")
        reply = requests.sample(64, 0.4, shard.spec)
        for slot, obs, following in zip(
            reply.fields["action"], reply.fields["obs"], reply.fields["next_obs"], strict=True
        ):
            np.testing.assert_array_equal(obs, batch["obs"][slot])
            np.testing.assert_array_equal(following, batch["next_obs"][slot])
    finally:
        client.close(0)
        requests.close()
        serving.stop()
        context.destroy(linger=0)


def test_frames_asked_for_on_a_grid_are_refused_before_start() -> None:
    problems = frame_problems(resolve({"env": GRID, "replay": {"frames": True}}))
    assert len(problems) == 1 and "is not the one before it shifted by a frame" in problems[0]
    assert frame_problems(resolve({"env": GRID})) == []


def test_the_ale_pipeline_s_stacks_are_proven_stacks() -> None:
    pytest.importorskip("ale_py")
    prove_frame_stacks(lambda: make_env("Pong", training=True), "Pong")


def test_gymnasium_s_frame_stack_of_a_vector_is_a_proven_stack() -> None:
    def make() -> gym.Env:
        return gym.wrappers.FrameStackObservation(gym.make("CartPole-v1"), 3)

    prove_frame_stacks(make, "CartPole stacked")


def test_an_actor_with_frame_shards_refuses_a_grid_on_its_first_step() -> None:
    """What an actor does if frame shards meet observations that are not stacks (a
    launcher that was not asked, a shard started by hand with ``--frames``)."""
    config = ActorConfig(env=GRID, envs_per_actor=2, n_step=1, seed=0)
    shape = env_shape(GRID)
    acting = build_acting(config, default_sections(), shape)
    writer = FrameWriter(
        2, 10, 1, history=8, compress=False, rng=np.random.default_rng(0), frame_shape=(10, 4)
    )
    maker = ExperienceMaker(config, acting.experience(config, shape, lambda: 0, True), writer)
    envs = [make_env(GRID, training=True) for _ in range(2)]
    observations = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    maker.begin(observations)
    following = np.stack([env.step(1)[0] for env in envs])
    none = np.zeros(2, bool)
    with pytest.raises(NotFrameStacks, match=r"tests.grid_env:Grid-v0: frame storage needs"):
        maker.step(
            observations,
            np.ones(2, np.int64),
            np.zeros(2, np.float32),
            following,
            following,
            none,
            none,
        )
