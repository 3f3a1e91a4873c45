"""A real Pong actor sends each frame once, over real sockets, to two frame shards; what
the shards serve back are exactly the stacks the env itself produced."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from apex.acting.actor import Actor, ActorEndpoints
from apex.algorithms.dqn.settings import DQNSettings
from apex.algorithms.nstep import NStepBuilder
from apex.algorithms.registry import build_acting, default_sections
from apex.envs.families import env_shape
from apex.settings import ActorConfig
from replay.protocol.requests import RequestClient
from tests.conftest import ShardProcess, wait_for

pytest.importorskip("ale_py")

PONG_FIELDS = (
    "--field",
    "obs:4,84,84:uint8",
    "--field",
    "action::int64",
    "--field",
    "reward::float32",
    "--field",
    "discount::float32",
    "--field",
    "next_obs:4,84,84:uint8",
)


def key(obs: np.ndarray, following: np.ndarray) -> bytes:
    return hashlib.blake2b(obs.tobytes() + following.tobytes(), digest_size=16).digest()


@pytest.fixture(params=["compressed", "whole"])
def frame_shards(request) -> Iterator[list[ShardProcess]]:
    extra = ("--frames",) + (("--raw-frames",) if request.param == "whole" else ())
    shards = ShardProcess.start_all(
        *[(*PONG_FIELDS, "--capacity", "4000", "--shard-index", str(i), *extra) for i in range(2)]
    )
    yield shards
    assert ShardProcess.stop_all(shards) == [0, 0]


def record_truth(maker, reference: NStepBuilder, truth: dict[bytes, tuple[float, float]]):
    """Wraps ``maker.step``: a builder of stacks in lock-step records what each of its
    transitions must come back as (the actor keeps no stacks with frame shards)."""
    emit = maker.step

    def recording_step(observations, actions, rewards, next_observations, final, *ends):
        expected = reference.step(observations, actions, rewards, final, *ends)
        out = emit(observations, actions, rewards, next_observations, final, *ends)
        np.testing.assert_array_equal(out["reward"], expected["reward"])
        np.testing.assert_array_equal(out["discount"], expected["discount"])
        for obs, following, reward, discount in zip(
            expected["obs"],
            expected["next_obs"],
            expected["reward"],
            expected["discount"],
            strict=True,
        ):
            truth[key(obs, following)] = (float(reward), float(discount))
        return out

    maker.step = recording_step


@pytest.mark.slow
@pytest.mark.parametrize("env_groups", [1, 2])
def test_pong_frames_go_once_and_come_back_as_the_envs_own_stacks(
    frame_shards, env_groups: int
) -> None:
    """Two env groups (``apex.acting.env_group``) share the actor's frame writer, each env a
    stream of it: what they send comes back as each env's own stacks too."""
    context = zmq.Context()
    episodes = context.socket(zmq.PULL)
    episodes_endpoint = f"tcp://127.0.0.1:{episodes.bind_to_random_port('tcp://127.0.0.1')}"
    config = ActorConfig(
        env="Pong",
        envs_per_actor=2,
        n_step=3,
        insert_batch=16,
        max_steps=360,
        seed=3,
        env_groups=env_groups,
    )
    endpoints = ActorEndpoints(
        tuple(s.endpoints for s in frame_shards), "tcp://127.0.0.1:1", episodes_endpoint
    )
    sections = {**default_sections(), "dqn": DQNSettings(epsilon=1.0)}
    actor = Actor(config, build_acting(config, sections, env_shape(config.env)), endpoints)
    assert len(actor._groups) == env_groups
    truth: dict[bytes, tuple[float, float]] = {}
    shape = env_shape(config.env)
    for group in actor._groups:
        reference = NStepBuilder(
            group.count,
            config.n_step,
            config.gamma,
            shape.observation_shape,
            shape.observation_dtype,
        )
        record_truth(group.maker, reference, truth)
    try:
        actor.run()
        assert actor._frames is not None, "the shards did not ask for frames"
        requests = [RequestClient(context, s.endpoints.request, sender=77) for s in frame_shards]
        sent = actor.transitions_sent
        wait_for(
            lambda: sum(r.info()["transitions_added"] for r in requests) == sent,
            timeout_s=30,
            what=f"{sent} transitions stored",
        )
        spec = env_shape("Pong").transition_spec()
        infos = [r.info() for r in requests]
        assert all(i["rejected_total"] == 0 for i in infos), [i["rejected"] for i in infos]
        assert all(i["size"] > 0 for i in infos), "both shards got a stretch of the streams"
        checked = 0
        for client in requests:
            reply = client.sample(256, 0.4, spec)
            for position in range(256):
                obs, following = reply.fields["obs"][position], reply.fields["next_obs"][position]
                expected = truth.get(key(obs, following))
                assert expected is not None, "a served stack is not one the env produced"
                assert expected == (
                    float(reply.fields["reward"][position]),
                    float(reply.fields["discount"][position]),
                )
                checked += 1
        assert checked == 512
        # Each frame once, plus the few repeated when a stretch moved shards (measured: 746
        # frames for 722, 3.4%).
        frames = sum(i["frames_received"] for i in infos)
        steps = config.max_steps * config.envs_per_actor
        assert steps <= frames <= 1.25 * steps + 64, (frames, steps)
        for client in requests:
            client.close()
    finally:
        episodes.close(linger=0)
        context.destroy(linger=0)
