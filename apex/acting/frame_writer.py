"""An actor's side of frame storage: each env copy's frames numbered, kept briefly, and sent
once to each shard that needs them.

Each env copy is a writer stream with an id of its own (random per actor incarnation, so a
restarted actor never links to its predecessor's frames). Every observation the env gives
(a reset, a step, an episode's final observation) adds its newest frame with the next
number of that stream; the first frame of an episode is flagged. A transition is then a
record: its stream, the numbers of its ``obs`` and ``next_obs`` frames, action, n-step
return and discount (``replay.frames.storage`` puts the stacks together). An IMPALA
unroll's record has the numbers of its ``T + 1`` observations' frames instead.

A shard must hold every frame that the stacks of its records reach: ``stack - 1`` frames
before a record's ``obs`` frame (or its episode's first frame, whose history is itself).
For each message the writer sends the frames of each stream that the chosen shard lacks:
the new ones when the stream's last stretch went to the same shard, else everything from
the oldest frame the message's records reach. Switching shards therefore repeats up to
``stack - 1 + n`` frames of each stream plus those not yet recorded; ``replay.inserts.client``
keeps an actor on one shard for a stretch of messages so that this stays a few percent.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from replay.frames.kernels import copy_out_blobs
from replay.frames.lz4_codec import compress_bound, kernels
from replay.protocol.messages import FrameInsert

# Stream ids: a random 40-bit actor incarnation, then 16 bits of env index.
_ENV_BITS = 16
_NONE = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def _number(
    next_number: np.ndarray,
    episode_start: np.ndarray,
    episode_first: np.ndarray,
    envs: np.ndarray,
    starts: bool,
    size: int,
    slots: np.ndarray,
) -> np.ndarray:
    """Numbers the next frame of each of ``envs``; fills its ring slot into ``slots``."""
    numbers = np.empty(envs.size, dtype=np.int64)
    for i in range(envs.size):
        env = envs[i]
        number = next_number[env]
        next_number[env] = number + 1
        if starts:
            episode_start[env] = number
        slots[i] = env * size + number % size
        episode_first[slots[i]] = episode_start[env]
        numbers[i] = number
    return numbers


class FrameWriter:
    """Numbers, keeps and sends one actor's frames.

    Frames live in a ring of ``stack + n + history`` slots per stream, whole or as LZ4
    blocks (compressed in one numba call per vector step), so neither observing nor
    building a message has a Python step per frame.

    Args:
        env_count: env copies (streams).
        stack: frames per observation ``k``.
        n: n-step of the records.
        history: frames kept per stream; must cover ``k - 1 + n`` plus the steps of records
            waiting to be sent (the actor's ``insert_batch``).
        compress: send LZ4 blocks (what a compressing shard takes) instead of whole frames.
        rng: draws this incarnation's stream ids.
        frame_shape: shape of one frame (84×84 for the Atari presets).
        unroll_steps: records are unrolls of this many observations (``T + 1``), not
            transitions.
    """

    def __init__(
        self,
        env_count: int,
        stack: int,
        n: int,
        history: int,
        compress: bool,
        rng: np.random.Generator,
        frame_shape: tuple[int, ...] = (84, 84),
        unroll_steps: int | None = None,
    ) -> None:
        self.stack = stack
        self._unroll_steps = unroll_steps
        self._compress = compress
        self._frame_shape = tuple(frame_shape)
        frame_bytes = int(np.prod(frame_shape))
        base = int(rng.integers(1, 2**40)) << _ENV_BITS
        self.streams = base + np.arange(env_count, dtype=np.int64)
        self._next = np.zeros(env_count, dtype=np.int64)
        self._size = stack + n + history
        slots = env_count * self._size
        # Per slot: the frame number of its episode's first frame (for a stack's reach).
        self._episode_first = np.zeros(slots, dtype=np.int64)
        self._episode_start = np.zeros(env_count, dtype=np.int64)
        if compress:
            self._compress_into = kernels().compress_into
            self._bound = compress_bound(frame_bytes)
            self._blobs = np.empty((slots, self._bound), dtype=np.uint8)
            self._positions = np.arange(slots, dtype=np.int64) * self._bound
            self._lengths = np.zeros(slots, dtype=np.int64)
        else:
            self._frames = np.empty((slots, frame_bytes), dtype=np.uint8)
        self._sent: dict[int, np.ndarray] = {}
        self.frames_sent = 0
        self.frames_repeated = 0

    def observe(self, envs: np.ndarray, frames: np.ndarray, episode_start: bool) -> np.ndarray:
        """Adds the newest frame of an observation of each of ``envs`` (``frames[i]`` is
        env ``envs[i]``'s); returns their numbers."""
        envs = np.asarray(envs, dtype=np.int64)
        slots = np.empty(envs.size, dtype=np.int64)
        numbers = _number(
            self._next,
            self._episode_start,
            self._episode_first,
            envs,
            bool(episode_start),
            self._size,
            slots,
        )
        rows = frames.reshape(envs.size, -1)
        if self._compress:
            self._compress_into(rows, self._blobs, slots, self._lengths)
        else:
            self._frames[slots] = rows
        return numbers

    def build(
        self,
        shard: int,
        refs: np.ndarray,
        scalars: dict[str, np.ndarray],
        priorities: np.ndarray,
    ) -> FrameInsert:
        """The message for ``shard``: the frames it lacks, then the records.

        Args:
            refs: int64 per record: env, ``obs`` frame number, ``next_obs`` frame number
                (``(m, 3)``); for unrolls env, then the ``T + 1`` observations' frame
                numbers (``(m, T + 2)``).
            scalars: action, reward, discount, ... per record.
            priorities: one per record.
        """
        env_count = len(self.streams)
        sent = self._sent.get(shard)
        if sent is None:
            sent = np.full(env_count, -1, dtype=np.int64)
        lowest = np.full(env_count, _NONE, dtype=np.int64)
        # A record's first frame is its oldest (numbers rise along a stream).
        np.minimum.at(lowest, refs[:, 0], refs[:, 1])
        first = sent + 1
        referred = np.flatnonzero(lowest != _NONE)
        reach = self._reach(referred, lowest[referred])
        # A gap on this shard: send the whole reach of the records' stacks.
        first[referred] = np.where(sent[referred] < reach - 1, reach, first[referred])
        first = np.maximum(first, np.maximum(self._next - self._size, 0))
        counts = np.maximum(self._next - first, 0)
        envs = np.repeat(np.arange(env_count, dtype=np.int64), counts)
        runs = np.cumsum(counts) - counts
        numbers = first[envs] + np.arange(len(envs)) - runs[envs]
        slots = envs * self._size + numbers % self._size
        records = {"stream": self.streams[refs[:, 0]]}
        if self._unroll_steps is None:
            records["obs_frame"] = np.ascontiguousarray(refs[:, 1])
            records["next_obs_frame"] = np.ascontiguousarray(refs[:, 2])
        else:
            records["obs_frame"] = np.ascontiguousarray(refs[:, 1:])
        records.update(scalars)
        head = (self.streams[envs], numbers, self._episode_first[slots] == numbers)
        if self._compress:
            offsets = np.zeros(len(slots) + 1, dtype=np.int64)
            np.cumsum(self._lengths[slots], out=offsets[1:])
            data = np.empty(offsets[-1], dtype=np.uint8)
            copy_out_blobs(
                self._blobs.reshape(-1), self._positions, self._lengths, slots, offsets, data
            )
            return FrameInsert(*head, records, priorities, data=data, offsets=offsets)
        frames = self._frames[slots].reshape(len(slots), *self._frame_shape)
        return FrameInsert(*head, records, priorities, frames=frames)

    def _reach(self, envs: np.ndarray, obs_numbers: np.ndarray) -> np.ndarray:
        """The oldest frame number the stack ending at each ``obs_numbers`` reaches: the
        episode's first frame bounds it when the frame is still kept."""
        reach = obs_numbers - (self.stack - 1)
        kept = (obs_numbers < self._next[envs]) & (obs_numbers >= self._next[envs] - self._size)
        slots = envs * self._size + obs_numbers % self._size
        return np.where(kept, np.maximum(reach, self._episode_first[slots]), reach)

    def forget(self, shard: int) -> None:
        """``shard`` came back from a snapshot and may lack recent frames: the next
        message to it carries its records' whole stacks again."""
        self._sent.pop(shard, None)

    def sent_to(self, shard: int, insert: FrameInsert) -> None:
        """Records what ``shard`` now holds after ``insert`` went there."""
        sent = self._sent.setdefault(shard, np.full(len(self.streams), -1, dtype=np.int64))
        envs = insert.streams - self.streams[0]
        others = [other for other in self._sent.values() if other is not sent]
        if others:
            elsewhere = np.max(others, axis=0)
            self.frames_repeated += int(np.count_nonzero(insert.numbers <= elsewhere[envs]))
        np.maximum.at(sent, envs, insert.numbers)
        self.frames_sent += len(insert.numbers)
