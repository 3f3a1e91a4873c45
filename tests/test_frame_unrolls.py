"""IMPALA's Atari unrolls on the frame path: an actor sends each frame once with unrolls
that refer to frames by number, a queue shard keeps each frame once, and the learner
gets exactly the unrolls of whole observations the same steps make."""

from __future__ import annotations

import numpy as np
import pytest

from apex.acting.frame_writer import FrameWriter
from apex.algorithms.acting_base import FeedForward
from apex.algorithms.impala.settings import ImpalaSettings
from apex.algorithms.protocols import Acting
from apex.algorithms.registry import BY_NAME
from apex.envs.families import env_shape
from apex.settings import ActorConfig
from replay.errors import InvalidBatchError
from replay.frames.spec import FrameStackSpec
from replay.protocol.sample_reply import SampleReply
from replay.server.config import ShardConfig
from replay.server.ingest import Ingest
from replay.server.snapshots import replay_state, restore_replay
from replay.store.snapshot import open_snapshot, write_snapshot
from replay.wire.layout import decode, encode
from tests.short_pong import group_experience

pytest.importorskip("ale_py")

ENVS, STEPS = 4, 5
SETTINGS = ImpalaSettings(unroll_length=STEPS)
# 50 steps an episode (tests/short_pong.py): a run of 140 steps crosses a few in every env.
ROUNDS = 140


class FramePolicy(FeedForward):
    """Acts on the observation alone (the newest frame's sum, modulo the actions), with
    log-probabilities and values made from it too: both runs act and bootstrap alike."""

    def __init__(self) -> None:
        self.last_log_probs = np.zeros(0)

    def explore(self, observations: np.ndarray, scales: np.ndarray, rng, state=None) -> np.ndarray:
        sums = observations[:, -1].sum(axis=(1, 2), dtype=np.int64)
        self.last_log_probs = -((sums % 7) / 7.0) - 0.1
        return sums % 6

    def values(self, observations: np.ndarray) -> np.ndarray:
        return (observations[:, -1].mean(axis=(1, 2)) / 255.0).astype(np.float64)

    def td_errors(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros(len(batch["action"]))


def unroll_spec():
    config = ActorConfig(env="Pong", algorithm="impala")
    return BY_NAME["impala"].transition_spec(env_shape("Pong"), config, SETTINGS)


def run(frames: FrameWriter | None, send=None) -> list[dict[str, np.ndarray]]:
    """Every batch of unrolls four short Pong envs make in ROUNDS steps, each handed to
    ``send`` as it is made (an actor sends them before its frames leave its ring)."""
    config = ActorConfig(env="Pong", envs_per_actor=ENVS, algorithm="impala", seed=3)
    acting = Acting(FramePolicy(), BY_NAME["impala"], SETTINGS)
    made = []
    for _, experience in group_experience(config, acting, frames, np.ones(ENVS), ROUNDS):
        made.append(experience)
        if send is not None:
            send(experience)
    return made


@pytest.mark.slow
@pytest.mark.parametrize("compress", [True, False], ids=["lz4", "whole"])
def test_unrolls_through_a_frame_queue_are_the_unrolls_of_whole_observations(
    compress, tmp_path
) -> None:
    whole = run(None)
    spec = unroll_spec()
    layout = FrameStackSpec.from_transition_spec(spec)
    assert layout is not None and layout.steps == STEPS + 1 and layout.stack == 4
    config = ShardConfig(
        spec=spec,
        frames=layout,
        compress_frames=compress,
        queue=True,
        capacity=128,
        min_size=1,
        insert_batch_hint=ENVS,
    )
    ingest = Ingest(config)
    writer = FrameWriter(
        ENVS,
        4,
        1,
        history=2 * STEPS * 2 + 8,
        compress=compress,
        rng=np.random.default_rng(1),
        unroll_steps=STEPS + 1,
    )

    def send(batch: dict[str, np.ndarray]) -> None:
        scalars = {name: batch[name] for name in layout.scalars}
        insert = writer.build(0, batch["refs"], scalars, np.ones(ENVS))
        message = insert.to_message(layout, sender=1, sequence=0, version=7)
        assert ingest.take(decode(encode(message))) == ENVS
        writer.sent_to(0, insert)

    referenced = run(writer, send)
    assert len(whole) == len(referenced) == ROUNDS // STEPS
    expected = {name: np.concatenate([b[name] for b in whole]) for name in spec}
    count = len(expected["action"])
    # Each frame once on the wire and in the store: about one a step (and one more an
    # episode), where whole unrolls carry (T + 1)·k = 24 a step.
    assert writer.frames_sent <= 1.2 * ENVS * ROUNDS
    assert ingest.replay.storage.frames_stored == writer.frames_sent
    half = count // 2
    first = ingest.replay.sample(half)  # stacks put together at the shard
    # The rest from the shard brought back from a snapshot (frames, cursor and all).
    snapshot = open_snapshot(write_snapshot(tmp_path, 1, *replay_state(ingest.replay)))
    restored = Ingest(config)
    restore_replay(restored.replay, snapshot.read, snapshot.meta)
    assert restored.replay.handed == half and restored.replay.size == count - half
    ingest = restored
    packed = ingest.replay.sample(count - half, packed=True)  # left apart for the wire
    reply = SampleReply(
        1.0,
        1.0,
        0,
        128,
        packed.indices,
        packed.generations,
        packed.priorities,
        packed.weights,
        packed.transitions,
        packed.frames,
    )
    second = SampleReply.from_message(decode(encode(reply.to_message(0, 0))), spec).fields
    for name in spec:
        got = np.concatenate([first.transitions[name], second[name]])
        np.testing.assert_array_equal(got, expected[name], err_msg=name)
    # The runs crossed episode ends, time limits (bootstrapped) among them.
    assert (expected["discount"] == 0).sum() >= ENVS
    assert ingest.replay.size == 0 and ingest.replay.evicted_queued == 0


def test_an_unroll_that_refers_to_a_frame_the_shard_lacks_is_refused_whole() -> None:
    spec = unroll_spec()
    layout = FrameStackSpec.from_transition_spec(spec)
    ingest = Ingest(
        ShardConfig(
            spec=spec, frames=layout, queue=True, capacity=8, min_size=1, compress_frames=False
        )
    )
    frames = np.arange(STEPS + 1, dtype=np.uint8)[:, None, None] * np.ones((84, 84), np.uint8)
    numbers = np.arange(STEPS + 1, dtype=np.int64)
    starts = numbers == 0
    ingest.replay.add_frames(np.full(STEPS + 1, 9), numbers, starts, frames)
    records = {
        "stream": np.array([9, 9]),
        "obs_frame": np.stack([numbers, numbers + 1]),
        "action": np.zeros((2, STEPS), np.int64),
        "reward": np.zeros((2, STEPS), np.float32),
        "discount": np.full((2, STEPS), 0.99, np.float32),
        "log_prob": np.full((2, STEPS), -0.5, np.float32),
        "version": np.zeros(2, np.int64),
    }
    # The second unroll's last observation is frame 6, never sent: neither is stored.
    with pytest.raises(InvalidBatchError, match=r"record 1 \(obs_frame 6 of stream 9\)"):
        ingest.replay.add(records, np.ones(2))
    assert ingest.replay.size == 0
    records = {name: array[:1] for name, array in records.items()}
    ingest.replay.add(records, np.ones(1))
    got = ingest.replay.sample(1).transitions["obs"][0]
    # Observation t is the stack ending at frame t; the episode's start repeats frame 0.
    assert got[:, -1, 0, 0].tolist() == list(range(STEPS + 1))
    assert got[1, :, 0, 0].tolist() == [0, 0, 0, 1]
