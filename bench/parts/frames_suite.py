"""Frames suite: Atari-sized replay on real Pong frames, each frame kept once.

Four figures, each on frames recorded from ALE Pong through the Pong preset's own
preprocessing (84×84 grayscale, frame skip 4, stacks of 4), random play:

* codecs: compression ratio and decode rate of LZ4 (as the shard calls it: one numba loop
  over C calls), and of lz4, zstd and blosc2 through their Python APIs, one call a frame;
* bytes per stored transition, every array and the sum-tree included, for whole
  transitions (``RingStorage``), frames kept whole, and frames LZ4-compressed, filled with
  the same streams;
* ready batches of 512 stacked transitions from each of those stores (stacks put together
  on ``replay.store.parts``' default threads, and on one);
* the RSS of a fresh process holding ``capacity`` compressed Pong transitions (a worker of
  its own: ``python -m bench.parts.frames_suite fill CAPACITY``); 2M in a full run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

from bench.timing import measure_rate
from bench.workers import REPO_ROOT, worker_env

SUITE = "frames"
STACK, N_STEP, BATCH = 4, 3, 512
STREAMS = 8


def pong_frames(count: int, seed: int = 0) -> np.ndarray:
    """``count`` newest frames of Pong observations under random play."""
    from apex.envs.families import make_env

    env = make_env("Pong", training=True)
    rng = np.random.default_rng(seed)
    observation, _ = env.reset(seed=seed)
    frames = [observation[-1].copy()]
    while len(frames) < count:
        observation, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        frames.append(observation[-1].copy())
        if terminated or truncated:
            observation, _ = env.reset()
            frames.append(observation[-1].copy())
    env.close()
    return np.stack(frames[:count])


def _scalars(count: int) -> dict[str, np.ndarray]:
    return {
        "action": np.zeros(count, np.int64),
        "reward": np.zeros(count, np.float32),
        "discount": np.full(count, 0.97, np.float32),
    }


def fill_frames(replay, frames: np.ndarray, transitions: int, chunk: int = 64) -> None:
    """``transitions`` n-step records over ``STREAMS`` streams cycling through ``frames``
    (each stream a long episode), written as an actor's messages would be."""
    per_stream = -(-transitions // STREAMS) + N_STEP
    for start in range(0, per_stream, chunk):
        numbers = np.arange(start, min(start + chunk, per_stream))
        for stream in range(STREAMS):
            picked = frames[(numbers + 997 * stream) % len(frames)]
            replay.add_frames(np.full(numbers.size, stream), numbers, numbers == 0, picked)
            # Records whose n-th next frame has now been sent.
            obs = numbers - N_STEP
            obs = obs[obs >= 0]
            if obs.size:
                records = {
                    "stream": np.full(obs.size, stream, np.int64),
                    "obs_frame": obs,
                    "next_obs_frame": obs + N_STEP,
                    **_scalars(obs.size),
                }
                replay.add(records, np.ones(obs.size))


def fill_whole(replay, frames: np.ndarray, transitions: int, chunk: int = 512) -> None:
    for start in range(0, transitions, chunk):
        count = min(chunk, transitions - start)
        ends = (start + np.arange(count)) % (len(frames) - STACK - N_STEP) + STACK
        stacks = frames[ends[:, None] - np.arange(STACK)[::-1]]
        following = frames[(ends + N_STEP)[:, None] - np.arange(STACK)[::-1]]
        replay.add({"obs": stacks, "next_obs": following, **_scalars(count)}, np.ones(count))


def _stores(capacity: int):
    from apex.envs.families import env_shape
    from replay import PrioritizedReplay
    from replay.frames.spec import FrameStackSpec
    from replay.frames.storage import FrameStackStorage

    spec = env_shape("Pong").transition_spec()
    layout = FrameStackSpec.from_transition_spec(spec)
    return {
        "apex-whole": lambda: PrioritizedReplay(spec, capacity, 0.6, rng=0),
        "apex-frames": lambda: PrioritizedReplay(
            None, capacity, 0.6, rng=0, storage=FrameStackStorage(layout, capacity)
        ),
        "apex-frames-lz4": lambda: PrioritizedReplay(
            None, capacity, 0.6, rng=0, storage=FrameStackStorage(layout, capacity, compress=True)
        ),
        # The same store gathering on one thread (the others use replay.store.parts' default).
        "apex-frames-1thread": lambda: PrioritizedReplay(
            None,
            capacity,
            0.6,
            rng=0,
            storage=FrameStackStorage(layout, capacity, gather_threads=1),
        ),
    }


def _codec_records(frames: np.ndarray, timing: dict) -> list[dict]:
    import lz4.block

    from replay.frames.lz4_codec import kernels

    records = []
    raw = frames.reshape(len(frames), -1)
    nbytes = raw.shape[1]
    blobs = [lz4.block.compress(row.tobytes(), store_size=False) for row in raw]
    offsets = np.cumsum([0, *(len(b) for b in blobs)], dtype=np.int64)
    data = np.frombuffer(b"".join(blobs), np.uint8)
    # The shard's path: one numba loop over C calls, through the gather kernel.
    gather = kernels().gather_compressed
    order = np.random.default_rng(1).integers(0, len(frames), BATCH * 7)
    out = np.empty((order.size, 1, nbytes), np.uint8)
    positions, lengths = offsets[:-1].copy(), np.diff(offsets).astype(np.int32)
    self_links = np.arange(len(frames), dtype=np.int32)

    def decode_batch() -> None:
        gather(data, positions, lengths, self_links, order, 1, out)

    candidates: list[tuple[str, list[bytes], Callable[[bytes], object] | None]] = [
        ("apex-lz4", blobs, None),
        ("lz4", blobs, lambda b: lz4.block.decompress(b, uncompressed_size=nbytes)),
    ]
    try:
        import zstandard

        compressor, decompressor = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
        candidates.append(
            ("zstd-3", [compressor.compress(r.tobytes()) for r in raw], decompressor.decompress)
        )
    except ImportError:
        records.append(_unavailable("pong-codecs", "zstd-3", "zstandard is not installed"))
    try:
        import blosc2

        packed = [blosc2.compress2(r.tobytes(), codec=blosc2.Codec.ZSTD, clevel=5) for r in raw]
        candidates.append(("blosc2-zstd-5", packed, blosc2.decompress2))
    except ImportError:
        records.append(_unavailable("pong-codecs", "blosc2-zstd-5", "blosc2 is not installed"))
    for name, packed, decode in candidates:
        ratio = raw.nbytes / sum(len(b) for b in packed)
        base = {"suite": SUITE, "case": "pong-codecs", "implementation": name, "status": "ok"}
        params = {"frames": len(frames), "frame_bytes": nbytes}
        records.append({**base, **_fixed("compression_ratio", "x", ratio), "params": params})
        if decode is None:
            rate = measure_rate(
                "decode",
                "frames/s",
                decode_batch,
                items_per_call=order.size,
                warmup_calls=3,
                **timing,
            )
        else:
            sample = [packed[i] for i in order[:512]]
            rate = measure_rate(
                "decode",
                "frames/s",
                lambda s=sample, d=decode: [d(b) for b in s],
                items_per_call=len(sample),
                warmup_calls=2,
                **timing,
            )
        records.append({**base, **rate.to_record(), "params": params})
    return records


def _ratio(by: dict, case: str, metric: str, numerator: str, denominator: str) -> dict | None:
    top, bottom = by.get((case, numerator, metric)), by.get((case, denominator, metric))
    if top is None or bottom is None:
        return None
    return {
        "suite": SUITE,
        "case": case,
        "metric": metric,
        "numerator": numerator,
        "denominator": denominator,
        "ratio": top["median"] / bottom["median"],
    }


def _fixed(metric: str, unit: str, value: float) -> dict:
    return {
        "metric": metric,
        "unit": unit,
        "median": value,
        "min": value,
        "max": value,
        "repeats": 1,
        "per_repeat_s": 0.0,
    }


def _unavailable(case: str, implementation: str, reason: str) -> dict:
    return {
        "suite": SUITE,
        "case": case,
        "implementation": implementation,
        "status": "unavailable",
        "reason": reason,
        "params": {},
    }


def _cpprb_record(frames: np.ndarray, capacity: int, timing: dict) -> dict:
    """cpprb's prioritized buffer with ``next_of`` and ``stack_compress`` (its frame
    deduplication for one stream), the same frames, sampled 512 at a time."""
    try:
        import cpprb
    except ImportError:
        return _unavailable(f"pong-{capacity}", "cpprb-stack", "cpprb is not installed")
    env_dict = {
        "obs": {"shape": (84, 84, STACK), "dtype": np.uint8},
        "act": {"dtype": np.int64},
        "rew": {},
        "done": {},
    }
    buffer = cpprb.PrioritizedReplayBuffer(
        capacity, env_dict, next_of="obs", stack_compress="obs", alpha=0.6
    )
    # cpprb stacks on the last axis: (84, 84, k), each stack one frame on from the last.
    last = np.moveaxis(frames, 0, -1)
    for start in range(0, capacity, 1000):
        ends = (start + np.arange(1000)) % (len(frames) - STACK - 1) + STACK
        obs = np.stack([last[..., e - STACK + 1 : e + 1] for e in ends])
        following = np.stack([last[..., e - STACK + 2 : e + 2] for e in ends])
        buffer.add(
            obs=obs,
            next_obs=following,
            act=np.zeros(1000, np.int64),
            rew=np.zeros(1000),
            done=np.zeros(1000),
        )
    rate = measure_rate(
        "sample", "batches/s", lambda: buffer.sample(BATCH, beta=0.4), warmup_calls=3, **timing
    )
    base = {"suite": SUITE, "case": f"pong-{capacity}", "implementation": "cpprb-stack"}
    return {**base, "status": "ok", **rate.to_record(), "params": {"capacity": capacity}}


def _store_records(frames: np.ndarray, capacity: int, timing: dict) -> list[dict]:
    records = [_cpprb_record(frames, capacity, timing)]
    for name, make in _stores(capacity).items():
        replay = make()
        if name == "apex-whole":
            fill_whole(replay, frames, capacity)
            stored = replay.storage.capacity * replay.storage.row_nbytes
            stored += replay.storage.generations.nbytes
        else:
            fill_frames(replay, frames, capacity)
            stored = replay.storage.nbytes
        params = {"capacity": capacity, "size": replay.size, "streams": STREAMS}
        base = {"suite": SUITE, "case": f"pong-{capacity}", "implementation": name, "status": "ok"}
        per = (stored + replay.tree.nbytes) / capacity
        records.append({**base, **_fixed("bytes_per_transition", "B", per), "params": params})
        if name == "apex-frames-lz4":
            used = replay.storage.frame_bytes_stored / replay.size
            records.append({**base, **_fixed("frame_bytes_used", "B", used), "params": params})
        buffers = replay.allocate_batch(BATCH)
        rate = measure_rate(
            "sample",
            "batches/s",
            lambda r=replay, b=buffers: r.sample(BATCH, 0.4, out=b),
            warmup_calls=3,
            **timing,
        )
        records.append({**base, **rate.to_record(), "params": params})
        del replay
    return records


def _rss_record(capacity: int) -> dict:
    command = [sys.executable, "-m", "bench.parts.frames_suite", "fill", str(capacity)]
    completed = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    base = {"suite": SUITE, "case": f"pong-fill-{capacity}", "implementation": "apex-frames-lz4"}
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        return {**base, "status": "unavailable", "reason": tail, "params": {}}
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    return {**base, "status": "ok", **_fixed("rss", "bytes", result["rss_bytes"]), "params": result}


def run(*, quick: bool = False, progress: Callable[[str], None] | None = None) -> dict:
    say = progress or (lambda _line: None)
    timing = {"repeats": 3 if quick else 5, "seconds_per_repeat": 0.1 if quick else 0.4}
    say("frames: recording Pong frames")
    frames = pong_frames(300 if quick else 3000)
    say("frames: codecs")
    records = _codec_records(frames, timing)
    capacity = 2_000 if quick else 100_000
    say(f"frames: stores of {capacity}")
    records += _store_records(frames, capacity, timing)
    fill = 20_000 if quick else 2_000_000
    say(f"frames: a process filled with {fill} compressed transitions")
    records.append(_rss_record(fill))
    by = {(r["case"], r["implementation"], r.get("metric")): r for r in records if "metric" in r}
    case = f"pong-{capacity}"
    ratios = [
        ratio
        for name in ("apex-frames", "apex-frames-lz4", "apex-frames-1thread")
        for ratio in (
            _ratio(by, case, "sample", name, "cpprb-stack"),
            _ratio(by, case, "bytes_per_transition", "apex-whole", name),
        )
        if ratio is not None
    ]
    config = {"quick": quick, "capacity": capacity, "fill": fill, **timing}
    return {"records": records, "ratios": ratios, "config": config}


def _fill(capacity: int) -> None:
    """Fills a fresh store with ``capacity`` compressed Pong transitions; prints its RSS."""
    started = time.monotonic()
    frames = pong_frames(3000)
    replay = _stores(capacity)["apex-frames-lz4"]()
    fill_frames(replay, frames, capacity)
    status = open("/proc/self/status", encoding="utf-8").read()  # noqa: SIM115
    rss_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
    storage = replay.storage
    print(
        json.dumps(
            {
                "capacity": capacity,
                "size": replay.size,
                "rss_bytes": rss_kib * 1024,
                "store_nbytes": storage.nbytes,
                "frame_bytes_stored": storage.frame_bytes_stored,
                "seconds": time.monotonic() - started,
            }
        )
    )


if __name__ == "__main__" and sys.argv[1:2] == ["fill"]:
    _fill(int(sys.argv[2]))
