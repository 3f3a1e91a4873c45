"""R2D2's Atari sequences on the frame path: an actor sends each frame once with sequences
that refer to frames by number, a prioritized frame shard keeps each frame once, and the
learner gets exactly the sequences of whole observations the same steps make, padding
and stored states included."""

from __future__ import annotations

import numpy as np
import pytest

from apex.acting.frame_writer import FrameWriter
from apex.algorithms.protocols import Acting
from apex.algorithms.r2d2.acting import R2D2Acting
from apex.algorithms.r2d2.settings import R2D2Settings
from apex.algorithms.registry import BY_NAME
from apex.envs.families import env_shape
from apex.settings import ActorConfig
from replay.frames.spec import FrameStackSpec
from replay.protocol.sample_reply import SampleReply
from replay.server.config import ShardConfig
from replay.server.ingest import Ingest
from replay.server.snapshots import replay_state, restore_replay
from replay.store.snapshot import open_snapshot, write_snapshot
from replay.wire.layout import decode, encode
from tests.short_pong import group_experience

pytest.importorskip("ale_py")

ENVS = 4
SETTINGS = R2D2Settings(sequence_length=6, sequence_period=3, burn_in=2, n_step=2, lstm_units=8)
# 50 steps an episode (tests/short_pong.py): a run of 120 steps crosses two in every env.
ROUNDS = 120


def actor_config() -> ActorConfig:
    return ActorConfig(env="Pong", envs_per_actor=ENVS, algorithm="r2d2", seed=3, hidden=(16,))


def run(frames: FrameWriter | None, send=None) -> tuple[list[dict], list[np.ndarray]]:
    """Every batch of sequences four short Pong envs make in ROUNDS steps, and each one's
    initial priorities; each batch is handed to ``send`` as it is made, with what the
    actor would send of it and those priorities."""
    config = actor_config()
    acting = Acting(R2D2Acting(config, env_shape("Pong"), SETTINGS), BY_NAME["r2d2"], SETTINGS)
    made, priorities = [], []
    for maker, experience in group_experience(config, acting, frames, np.full(ENVS, 0.3), ROUNDS):
        sent, initial = maker.priorities(dict(experience), 0.0)
        made.append(experience)
        priorities.append(initial)
        if send is not None:
            send(sent, initial)
    return made, priorities


@pytest.mark.slow
@pytest.mark.parametrize("compress", [True, False], ids=["lz4", "whole"])
def test_sequences_through_a_frame_shard_are_the_sequences_of_whole_observations(
    compress, tmp_path
) -> None:
    whole, whole_priorities = run(None)
    spec = BY_NAME["r2d2"].transition_spec(env_shape("Pong"), actor_config(), SETTINGS)
    layout = FrameStackSpec.from_transition_spec(spec)
    assert layout is not None and layout.steps == SETTINGS.sequence_length + 1
    config = ShardConfig(
        spec=spec,
        frames=layout,
        compress_frames=compress,
        capacity=512,
        min_size=1,
        insert_batch_hint=ENVS,
        seed=5,
    )
    ingest = Ingest(config)
    writer = FrameWriter(
        ENVS,
        4,
        1,
        history=2 * 7 * 2 + 8,
        compress=compress,
        rng=np.random.default_rng(1),
        unroll_steps=layout.steps,
    )

    def send(sent: dict[str, np.ndarray], priorities: np.ndarray) -> None:
        assert "obs" not in sent  # the observations go as frames
        scalars = {name: sent[name] for name in layout.scalars}
        insert = writer.build(0, sent["refs"], scalars, priorities)
        message = insert.to_message(layout, sender=1, sequence=0, version=7)
        assert ingest.take(decode(encode(message))) == len(priorities)
        writer.sent_to(0, insert)

    referenced, referenced_priorities = run(writer, send)
    expected = {name: np.concatenate([b[name] for b in whole]) for name in spec}
    count = len(expected["action"])
    assert count == sum(len(b["action"]) for b in referenced) == ingest.replay.size
    # The same steps, the same priorities: the actor computes them from the observations.
    np.testing.assert_allclose(
        np.concatenate(referenced_priorities), np.concatenate(whole_priorities), rtol=1e-6
    )
    # Each frame once on the wire and in the store: about one a step and one an episode,
    # where whole sequences carry (m + 1)·k = 28 a step (twice, overlapping).
    assert writer.frames_sent <= 1.2 * ENVS * ROUNDS
    assert ingest.replay.storage.frames_stored == writer.frames_sent
    # Items are stored in the order they came, so a sampled slot names its sequence.
    first = ingest.replay.sample(256, 0.4)  # stacks put together at the shard
    # More from the shard brought back from a snapshot (frames, priorities and all).
    snapshot = open_snapshot(write_snapshot(tmp_path, 1, *replay_state(ingest.replay)))
    restored = Ingest(config)
    restore_replay(restored.replay, snapshot.read, snapshot.meta)
    assert restored.replay.size == count
    packed = restored.replay.sample(256, 0.4, packed=True)  # left apart for the wire
    reply = SampleReply(
        1.0,
        1.0,
        0,
        512,
        packed.indices,
        packed.generations,
        packed.priorities,
        packed.weights,
        packed.transitions,
        packed.frames,
    )
    second = SampleReply.from_message(decode(encode(reply.to_message(0, 0))), spec).fields
    for indices, fields in ((first.indices, first.transitions), (packed.indices, second)):
        for name in spec:
            np.testing.assert_array_equal(fields[name], expected[name][indices], err_msg=name)
    sampled = np.concatenate([first.indices, packed.indices])
    # The samples reached padded sequences (episode ends) and ones begun mid-episode.
    assert (expected["mask"][sampled] == 0).any() and (expected["starts"][sampled] == 0).any()
    assert (expected["discount"] == 0).sum() + (expected["mask"] == 0).sum() >= ENVS
