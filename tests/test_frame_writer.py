"""The actor's frame writer: every message carries each frame its records' stacks reach on
the chosen shard, frames come out as they went in, and nothing is repeated needlessly."""

from __future__ import annotations

import numpy as np
import pytest

from apex.acting.frame_writer import FrameWriter

STACK, N, ENVS = 4, 3, 3
SHAPE = (6, 5)


def _frames(message) -> np.ndarray:
    if not message.compressed:
        return message.frames.reshape(len(message.numbers), -1)
    import lz4.block

    size = int(np.prod(SHAPE))
    blobs = [
        message.data[message.offsets[i] : message.offsets[i + 1]].tobytes()
        for i in range(len(message.numbers))
    ]
    return np.stack(
        [np.frombuffer(lz4.block.decompress(b, uncompressed_size=size), np.uint8) for b in blobs]
    )


@pytest.mark.parametrize("compress", [False, True], ids=["whole", "compressed"])
def test_each_shard_gets_every_frame_its_records_reach(compress):
    rng = np.random.default_rng(7)
    writer = FrameWriter(ENVS, STACK, N, history=40, compress=compress, rng=rng, frame_shape=SHAPE)
    truth: dict[tuple[int, int], np.ndarray] = {}  # (env, number) -> frame
    first_of: dict[tuple[int, int], int] = {}  # (env, number) -> its episode's first number
    held: dict[int, set] = {0: set(), 1: set(), 2: set()}
    episode_first = np.zeros(ENVS, dtype=np.int64)
    pending: list[tuple[int, int, int]] = []

    def observe(envs, start):
        frames = rng.integers(0, 256, (len(envs), *SHAPE), dtype=np.uint8)
        numbers = writer.observe(envs, frames, episode_start=start)
        for env, number, frame in zip(envs, numbers, frames, strict=True):
            if start:
                episode_first[env] = number
            truth[(env, number)] = frame.reshape(-1)
            first_of[(env, number)] = int(episode_first[env])
        return numbers

    everyone = np.arange(ENVS)
    observe(everyone, True)
    since_start = np.zeros(ENVS, dtype=np.int64)
    for step in range(300):
        following = observe(everyone, False)
        since_start += 1
        for env in range(ENVS):
            if since_start[env] >= N:
                pending.append((env, int(following[env]) - N, int(following[env])))
        ended = np.flatnonzero(rng.random(ENVS) < 0.04)
        if ended.size:
            observe(ended, True)
            since_start[ended] = 0
        if len(pending) >= 8 or step == 299:
            refs = np.array(pending, dtype=np.int64)
            pending.clear()
            shard = int(rng.integers(3))
            message = writer.build(shard, refs, {}, np.ones(len(refs)))
            decoded = _frames(message)
            for stream, number, start, frame in zip(
                message.streams - writer.streams[0],
                message.numbers,
                message.starts,
                decoded,
                strict=True,
            ):
                key = (int(stream), int(number))
                np.testing.assert_array_equal(frame, truth[key])
                assert bool(start) == (first_of[key] == number)
                held[shard].add(key)
            writer.sent_to(shard, message)
            sent_envs = message.streams - writer.streams[0]
            for env in set(refs[:, 0].tolist()):
                # Nothing older than the oldest frame these records reach is sent.
                reach = min(
                    max(obs - STACK + 1, first_of[(env, obs)]) for e, obs, _ in refs if e == env
                )
                assert np.all(message.numbers[sent_envs == env] >= reach)
            for env, obs, following_number in refs:
                for head in (obs, following_number):
                    for number in range(max(head - STACK + 1, first_of[(env, head)]), head + 1):
                        assert (env, number) in held[shard], (shard, env, number, head)
    assert writer.frames_repeated > 0
    # Stretches on one shard send each frame once: repeats stay a fraction of all frames.
    assert writer.frames_repeated < writer.frames_sent


def test_one_shard_gets_each_frame_exactly_once():
    rng = np.random.default_rng(3)
    writer = FrameWriter(2, STACK, N, history=16, compress=False, rng=rng, frame_shape=SHAPE)
    envs = np.arange(2)
    writer.observe(envs, np.zeros((2, *SHAPE), np.uint8), episode_start=True)
    seen = []
    for _ in range(20):
        numbers = writer.observe(envs, np.ones((2, *SHAPE), np.uint8), episode_start=False)
        refs = np.array([[e, max(n - N, 0), n] for e, n in zip(envs, numbers, strict=True)])
        message = writer.build(0, refs, {}, np.ones(2))
        writer.sent_to(0, message)
        seen += list(zip(message.streams.tolist(), message.numbers.tolist(), strict=True))
    assert len(seen) == len(set(seen)) == 2 * 21
    assert writer.frames_repeated == 0
