"""An actor's side of frame storage: each env copy's frames numbered, kept briefly, and sent
once to each shard that needs them.

Each env copy is a writer stream with an id of its own (random per actor incarnation, so a
restarted actor never links to its predecessor's frames). Every observation the env gives
(a reset, a step, an episode's final observation) adds its newest frame with the next
number of that stream; the first frame of an episode is flagged. A transition is then a
record: its stream, the numbers of its ``obs`` and ``next_obs`` frames, action, n-step
return and discount (``replay.frame_storage`` puts the stacks together).

A shard must hold every frame that the stacks of its records reach: ``stack - 1`` frames
before a record's ``obs`` frame (or its episode's first frame, whose history is itself).
For each message the writer sends the frames of each stream that the chosen shard lacks:
the new ones when the stream's last stretch went to the same shard, else everything from
the oldest frame the message's records reach. Switching shards therefore repeats up to
``stack - 1 + n`` frames of each stream plus those not yet recorded; ``replay.client``
keeps an actor on one shard for a stretch of messages so that this stays a few percent.
"""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np

from replay.messages import FrameInsert

# Stream ids: a random 40-bit actor incarnation, then 16 bits of env index.
_ENV_BITS = 16


class FrameWriter:
    """Numbers, keeps and sends one actor's frames.

    Args:
        env_count: env copies (streams).
        stack: frames per observation ``k``.
        n: n-step of the records.
        history: frames kept per stream; must cover ``k - 1 + n`` plus the steps of records
            waiting to be sent (the actor's ``insert_batch``).
        compress: send LZ4 blocks (what a compressing shard takes) instead of whole frames.
        rng: draws this incarnation's stream ids.
    """

    def __init__(
        self,
        env_count: int,
        stack: int,
        n: int,
        history: int,
        compress: bool,
        rng: np.random.Generator,
    ) -> None:
        self.stack = stack
        self._compress = compress
        if compress:
            import lz4.block

            # The array's own buffer: no copy to bytes first.
            self._pack = lambda frame: lz4.block.compress(
                np.ascontiguousarray(frame), store_size=False
            )
        base = int(rng.integers(1, 2**40)) << _ENV_BITS
        self.streams = base + np.arange(env_count, dtype=np.int64)
        self._next = np.zeros(env_count, dtype=np.int64)
        size = stack + n + history
        # Per stream: (number, episode start number, frame or blob), oldest first.
        self._kept: list[deque] = [deque(maxlen=size) for _ in range(env_count)]
        self._episode_start = np.zeros(env_count, dtype=np.int64)
        self._sent: dict[int, np.ndarray] = {}
        self.frames_sent = 0
        self.frames_repeated = 0

    def observe(self, env: int, frame: np.ndarray, episode_start: bool) -> int:
        """Adds the newest frame of an observation of ``env``; returns its number."""
        number = int(self._next[env])
        self._next[env] = number + 1
        if episode_start:
            self._episode_start[env] = number
        payload = self._pack(frame) if self._compress else np.array(frame, copy=True)
        self._kept[env].append((number, int(self._episode_start[env]), payload))
        return number

    def build(
        self,
        shard: int,
        refs: np.ndarray,
        scalars: dict[str, np.ndarray],
        priorities: np.ndarray,
    ) -> FrameInsert:
        """The message for ``shard``: the frames it lacks, then the records.

        Args:
            refs: ``(m, 3)`` int64 per record: env, ``obs`` frame number, ``next_obs``
                frame number.
            scalars: action, reward, discount, ... per record.
            priorities: one per record.
        """
        sent = self._sent.get(shard)
        if sent is None:
            sent = np.full(len(self._kept), -1, dtype=np.int64)
        envs, numbers, starts, payloads = [], [], [], []
        for env, kept in enumerate(self._kept):
            mine = refs[:, 0] == env
            lowest = int(refs[mine, 1].min()) if mine.any() else None
            first = int(sent[env]) + 1
            if lowest is not None:
                reach = self._reach(env, lowest)
                if sent[env] < reach - 1:  # a gap on this shard: send the whole reach
                    first = reach
            if not kept:
                continue
            # Numbers in the deque are consecutive: skip straight to the first one wanted.
            skip = max(0, first - kept[0][0])
            for number, start, payload in itertools.islice(kept, skip, None):
                envs.append(env)
                numbers.append(number)
                starts.append(number == start)
                payloads.append(payload)
        records = {
            "stream": self.streams[refs[:, 0]],
            "obs_frame": np.ascontiguousarray(refs[:, 1]),
            "next_obs_frame": np.ascontiguousarray(refs[:, 2]),
            **scalars,
        }
        head = (self.streams[np.asarray(envs, dtype=np.int64)], np.asarray(numbers, np.int64),
                np.asarray(starts, dtype=bool))  # fmt: skip
        if self._compress:
            offsets = np.cumsum([0, *(len(p) for p in payloads)], dtype=np.int64)
            data = np.frombuffer(b"".join(payloads), dtype=np.uint8)
            return FrameInsert(*head, records, priorities, data=data, offsets=offsets)
        return FrameInsert(*head, records, priorities, frames=np.stack(payloads))

    def _reach(self, env: int, obs_number: int) -> int:
        """The oldest frame number a stack ending at ``obs_number`` reaches."""
        for number, start, _ in self._kept[env]:
            if number == obs_number:
                return max(obs_number - (self.stack - 1), start)
        return obs_number - (self.stack - 1)  # fell out of history: the shard refuses it

    def sent_to(self, shard: int, insert: FrameInsert) -> None:
        """Records what ``shard`` now holds after ``insert`` went there."""
        sent = self._sent.setdefault(shard, np.full(len(self._kept), -1, dtype=np.int64))
        envs = insert.streams - self.streams[0]
        others = [other for other in self._sent.values() if other is not sent]
        if others:
            elsewhere = np.max(others, axis=0)
            self.frames_repeated += int(np.count_nonzero(insert.numbers <= elsewhere[envs]))
        np.maximum.at(sent, envs, insert.numbers)
        self.frames_sent += len(insert.numbers)
