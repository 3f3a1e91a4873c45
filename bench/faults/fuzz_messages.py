"""Hostile messages for a live shard, each of a known fate, for ``bench.faults.fuzz_suite``.

Every hostile message below is malformed by construction, so the shard must count it as
rejected (one count per message) and change nothing; the fuzz then checks the shard's
counters against what was sent, exactly. The cases follow the wire format
(``replay.wire.layout``): random frames, truncated and oversized headers, bad magic, versions,
kinds, dtype codes, dimensions and reserved bytes, frame counts and declared sizes that
do not match the bytes, arrays that do not match the spec, NaN/inf/negative priorities,
absurd counts, and mis-shaped or mis-typed priority updates. Well-formed updates that name
no stored item (``forged_update``) are not rejected but dropped, each counted by reason.

Valid traffic is made here too: inserts whose every field encodes a transition id
(``transition_ids`` reads it back), under real or invented sender ids.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

from replay.store.spec import TransitionSpec
from replay.wire.layout import HEADER_NBYTES, MAGIC, Kind, Message, encode

# Kinds a shard's request socket must refuse: replies, inserts, and numbers no kind has
# (application kinds 32-63 included).
_REQUEST_SOCKET_REFUSES = [
    Kind.SAMPLE_REPLY,
    Kind.INFO_REPLY,
    Kind.SPEC_REPLY,
    Kind.ERROR,
    Kind.CREDIT_REPLY,
    Kind.INSERT,
    Kind.INSERT_FRAMES,
] + [k for k in range(256) if k not in {int(kind) for kind in Kind}]
_INSERT_SOCKET_REFUSES = [k for k in range(256) if k not in (Kind.INSERT, Kind.INSERT_FRAMES)]
_VERSION_OFFSET, _KIND_OFFSET = 2, 3
_ARRAY_COUNT_OFFSET = 28
STALE_GENERATION = 10**9  # past every item a fuzz run writes


def _bytes(frames: list) -> list[bytes]:
    return [bytes(frame) for frame in frames]


def _poke(frame: bytes, offset: int, value: bytes) -> bytes:
    return frame[:offset] + value + frame[offset + len(value) :]


class HostileMessages:
    """Makes valid and hostile messages for a shard storing ``spec``.

    Args:
        spec: the shard's fields (every field numeric, as a real spec is).
        rng: the only source of randomness: a seed replays a fuzz run exactly.
    """

    def __init__(self, spec: TransitionSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self.rng = rng
        self.insert_cases: dict[str, Callable[[], list[bytes]]] = {
            name[len("_insert_") :]: getattr(self, name)
            for name in sorted(dir(self))
            if name.startswith("_insert_")
        }
        self.request_cases: dict[str, Callable[[int], list[bytes]]] = {
            name[len("_request_") :]: getattr(self, name)
            for name in sorted(dir(self))
            if name.startswith("_request_")
        }

    # -- valid traffic -------------------------------------------------------------------

    def batch(self, first_id: int, count: int) -> dict[str, np.ndarray]:
        """Transitions ``first_id ...``: every field of row i holds ``first_id + i``."""
        ids = np.arange(first_id, first_id + count)
        return {
            name: np.ascontiguousarray(
                np.broadcast_to(ids.reshape((count,) + (1,) * len(f.shape)), (count, *f.shape))
            ).astype(f.dtype)
            for name, f in self.spec.items()
        }

    def valid_insert(self, sender: int, first_id: int, count: int, pack: bool = True) -> list:
        arrays = (*self.batch(first_id, count).values(), np.ones(count))
        return encode(Message(Kind.INSERT, sender, 0, 0, count, 0.0, arrays), pack=pack)

    def _arrays(self, count: int) -> list[np.ndarray]:
        return [*self.batch(int(self.rng.integers(0, 10**6)), count).values(), np.ones(count)]

    def _insert(self, arrays, count: int | None = None, pack: bool = True) -> list[bytes]:
        sender = int(self.rng.integers(0, 2**32))
        rows = len(arrays[0]) if count is None else count
        return _bytes(
            encode(Message(Kind.INSERT, sender, 0, 0, rows, 0.0, tuple(arrays)), pack=pack)
        )

    def _one(self, options):
        return options[int(self.rng.integers(0, len(options)))]

    # -- hostile inserts (every one must be counted as rejected) -------------------------

    def _insert_random_frames(self) -> list[bytes]:
        frames = []
        for _ in range(int(self.rng.integers(1, 4))):
            frame = self.rng.integers(0, 256, int(self.rng.integers(0, 300)), np.uint8).tobytes()
            frames.append(frame)
        if frames[0][:1] == MAGIC[:1]:  # never the magic by chance: its fate is known
            frames[0] = b"Z" + frames[0][1:]
        return frames

    def _insert_truncated_header(self) -> list[bytes]:
        frames = self._insert(self._arrays(4))
        return [frames[0][: int(self.rng.integers(0, HEADER_NBYTES))]]

    def _insert_bad_magic(self) -> list[bytes]:
        frames = self._insert(self._arrays(4))
        return [_poke(frames[0], 0, b"XA")]

    def _insert_unknown_version(self) -> list[bytes]:
        version = self._one([v for v in range(256) if v != 3])
        return [_poke(self._insert(self._arrays(4))[0], _VERSION_OFFSET, bytes([version]))]

    def _insert_wrong_kind(self) -> list[bytes]:
        kind = self._one(_INSERT_SOCKET_REFUSES)
        return [_poke(self._insert(self._arrays(4))[0], _KIND_OFFSET, bytes([kind]))]

    def _insert_truncated_payload(self) -> list[bytes]:
        frame = self._insert(self._arrays(8))[0]
        cut = int(self.rng.integers(1, len(frame) - HEADER_NBYTES))
        return [frame[:-cut]]

    def _insert_trailing_bytes(self) -> list[bytes]:
        frame = self._insert(self._arrays(8))[0]
        return [
            frame + self.rng.integers(0, 256, int(self.rng.integers(8, 512)), np.uint8).tobytes()
        ]

    def _insert_missing_frame(self) -> list[bytes]:
        frames = self._insert(self._arrays(4), pack=False)
        del frames[int(self.rng.integers(1, len(frames)))]
        return frames

    def _insert_extra_frame(self) -> list[bytes]:
        frames = self._insert(self._arrays(4), pack=False)
        return [*frames, self.rng.integers(0, 256, 16, np.uint8).tobytes()]

    def _insert_array_count_lies(self) -> list[bytes]:
        frame = self._insert(self._arrays(4))[0]
        count = self._one([0, 1, 5, 7, 65, 2**16 - 1])
        return [_poke(frame, _ARRAY_COUNT_OFFSET, struct.pack("<H", count))]

    def _insert_oversized_header(self) -> list[bytes]:
        """Descriptors that announce enormous shapes over a few bytes of data."""
        frames = self._insert(self._arrays(4), pack=False)
        header = bytearray(frames[0])
        # The first descriptor's first dimension (after its 4-byte code/ndim/reserved).
        struct.pack_into("<I", header, HEADER_NBYTES + 4, self._one([2**31, 2**32 - 1, 10**9]))
        return [bytes(header), *frames[1:]]

    def _insert_bad_descriptor(self) -> list[bytes]:
        frames = self._insert(self._arrays(4), pack=False)
        header = bytearray(frames[0])
        field, value = self._one([(0, 200), (1, 9), (1, 255), (2, 1), (3, 7)])
        header[HEADER_NBYTES + field] = value  # dtype code, ndim, reserved bytes
        return [bytes(header), *frames[1:]]

    def _insert_wrong_shape(self) -> list[bytes]:
        arrays = self._arrays(4)
        arrays[0] = np.zeros((4, 5), arrays[0].dtype)
        return self._insert(arrays)

    def _insert_wrong_dtype(self) -> list[bytes]:
        arrays = self._arrays(4)
        arrays[0] = arrays[0].astype(np.float64 if arrays[0].dtype != np.float64 else np.int8)
        return self._insert(arrays)

    def _insert_count_lies(self) -> list[bytes]:
        return self._insert(self._arrays(4), count=self._one([0, 3, 5, 2**32 - 1]))

    def _insert_ragged_arrays(self) -> list[bytes]:
        arrays = self._arrays(4)
        arrays[-2] = arrays[-2][:3]
        return self._insert(arrays)

    def _insert_bad_priorities(self) -> list[bytes]:
        arrays = self._arrays(4)
        arrays[-1] = arrays[-1].copy()
        arrays[-1][int(self.rng.integers(0, 4))] = self._one([np.nan, np.inf, -np.inf, -1.0])
        return self._insert(arrays)

    def _insert_empty_message(self) -> list[bytes]:
        return [b""]

    # -- hostile requests (rejected; ``forged_update``'s are dropped item by item) -------

    def _request(self, kind: int, count: int = 0, scalar: float = 0.0, arrays=()) -> list[bytes]:
        sender = int(self.rng.integers(0, 2**32))
        return _bytes(encode(Message(Kind(kind), sender, 0, 0, count, scalar, tuple(arrays))))

    def _request_random_frames(self, size: int) -> list[bytes]:
        return self._insert_random_frames()

    def _request_truncated_header(self, size: int) -> list[bytes]:
        return [self._request(Kind.INFO)[0][: int(self.rng.integers(0, HEADER_NBYTES))]]

    def _request_unknown_version(self, size: int) -> list[bytes]:
        version = self._one([v for v in range(256) if v != 3])
        return [_poke(self._request(Kind.INFO)[0], _VERSION_OFFSET, bytes([version]))]

    def _request_wrong_kind(self, size: int) -> list[bytes]:
        kind = self._one(_REQUEST_SOCKET_REFUSES)
        return [_poke(self._request(Kind.INFO)[0], _KIND_OFFSET, bytes([kind]))]

    def _request_absurd_sample(self, size: int) -> list[bytes]:
        count, beta = self._one(
            [
                (0, 0.4),
                (2**32 - 1, 0.4),
                (10**7, 0.4),
                (32, float("nan")),
                (32, float("inf")),
                (32, -1.0),
            ]
        )
        return self._request(Kind.SAMPLE, count, beta)

    def _request_snapshot_without_snapshots(self, size: int) -> list[bytes]:
        return self._request(Kind.SNAPSHOT)

    def _request_bad_update(self, size: int) -> list[bytes]:
        n = 4
        indices = self.rng.integers(0, max(size, 1), n).astype(np.int64)
        generations = indices.copy()
        priorities = np.ones(n)
        case = int(self.rng.integers(0, 5))
        if case == 0:
            priorities = priorities[:3]
        elif case == 1:
            indices = indices.astype(np.int32)
        elif case == 2:
            return self._request(Kind.UPDATE, n, 0.0, (indices, generations))
        elif case == 3:
            generations = generations.astype(np.float64)
        else:
            indices = indices.reshape(2, 2)
        return self._request(Kind.UPDATE, n, 0.0, (indices, generations, priorities))

    def forged_update(self, size: int, capacity: int, n: int = 4):
        """A well-formed UPDATE that names no item the shard holds, and why it must be
        dropped: ``(indices, generations, priorities, reason)``, every one of its ``n``
        updates dropped for ``reason`` (``replay.store.prioritized.UPDATE_DROP_REASONS``).

        The fuzzed store never wraps, so slot ``s < size`` holds item ``s`` and the
        others hold nothing; a forged update that landed would change the total
        priority, which the fuzz checks."""
        written = self.rng.integers(0, max(size, 1), n).astype(np.int64)
        case = int(self.rng.integers(0, 5))
        if case == 0:  # empty slots at generation -1, their sentinel: the reviewer's case
            indices = self.rng.integers(size, capacity, n).astype(np.int64)
            return indices, np.full(n, -1, np.int64), np.full(n, 1e6), "never_written"
        if case == 1:  # items not written yet, or never this slot's
            shift = self._one([size, capacity, STALE_GENERATION])
            return written, written + shift, np.full(n, 9.0), "never_written"
        if case == 2:
            return written, np.full(n, -1, np.int64), np.full(n, 9.0), "never_written"
        if case == 3:
            indices = np.array([self._one([-1, -(2**40), capacity, 2**40]) for _ in range(n)])
            return indices.astype(np.int64), written, np.full(n, 9.0), "out_of_range"
        priorities = np.array([self._one([np.nan, np.inf, -np.inf, -2.0]) for _ in range(n)])
        return written, written.copy(), priorities, "bad_priority"


def transition_ids(obs: np.ndarray) -> np.ndarray:
    """The ids :meth:`HostileMessages.batch` wrote into sampled observations."""
    return obs.reshape(len(obs), -1)[:, 0].astype(np.int64)
