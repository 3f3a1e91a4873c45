"""LZ4 block compression of frames, callable from numba kernels.

The codec was chosen by measuring it on real Pong frames (84×84 grayscale, 3,000 frames of
random play; ``bench/frame_codecs.py``): LZ4 shrinks a frame 29× (245 bytes) and decodes it
in 0.45 µs from a numba loop (15 GB/s out); zstd level 3 shrinks it 43× but decodes 20×
slower, and blosc2 adds ~120 µs of overhead per small chunk. What bounds a shard is
putting 3,584 frames together for each batch of 512, so decode speed decides.

The C functions come from the ``lz4`` package's own extension module (it exports
``LZ4_compress_default``, ``LZ4_decompress_safe`` and ``LZ4_compressBound``), loaded with
ctypes, so numba calls them with no Python in between. ``LZ4_decompress_safe`` never
writes past its output and returns a negative number on malformed input, so a frame sent by
a peer is checked by decoding it once when it arrives.

The kernels call them by symbol name (numba's ``ExternalFunction``, the library loaded
into LLVM's symbol search first), not through a ctypes function's address, which differs
from one process to the next: so they are cached on disk like the other kernels, and a
shard or an actor no longer spends about a second compiling each one at start.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numba import njit, types

from replay.errors import ReplayError
from replay.frames.kernels import chain_slots
from replay.store.prefetch import FRAMES_AHEAD, prefetch_range


class CodecUnavailable(ReplayError):
    """The ``lz4`` package (and so its C codec) is not installed."""


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    try:
        import lz4.block
    except ImportError as exc:
        raise CodecUnavailable("frame compression needs the lz4 package: pip install lz4") from exc
    paths = sorted(Path(lz4.block.__path__[0]).glob("_block*.so"))
    if not paths:
        raise CodecUnavailable(f"no compiled lz4 block module in {lz4.block.__path__[0]}")
    library = ctypes.CDLL(str(paths[0]))
    try:
        pointers_and_sizes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        for name, argtypes in (
            ("LZ4_compress_default", pointers_and_sizes),
            ("LZ4_decompress_safe", pointers_and_sizes),
            ("LZ4_compressBound", [ctypes.c_int]),
        ):
            function = getattr(library, name)
            function.restype = ctypes.c_int
            function.argtypes = argtypes
    except AttributeError as exc:
        raise CodecUnavailable(f"the lz4 package does not export {exc}") from exc
    import llvmlite.binding

    # Where the kernels' calls (by symbol name, below) are resolved, compiled or cached.
    llvmlite.binding.load_library_permanently(str(paths[0]))
    return library


# int LZ4_compress_default(const char* src, char* dst, int srcSize, int dstCapacity) and
# int LZ4_decompress_safe(const char* src, char* dst, int compressedSize, int dstCapacity):
# the pointers are passed as addresses (``array.ctypes.data``), the same register either way.
_CODEC_SIGNATURE = types.int32(types.intp, types.intp, types.int32, types.int32)
_compress = types.ExternalFunction("LZ4_compress_default", _CODEC_SIGNATURE)
_decompress = types.ExternalFunction("LZ4_decompress_safe", _CODEC_SIGNATURE)


def compress_bound(nbytes: int) -> int:
    """The most bytes LZ4 can produce from ``nbytes`` (incompressible input grows a bit)."""
    return int(_library().LZ4_compressBound(nbytes))


class Lz4Kernels(NamedTuple):
    """Numba kernels bound to the C codec (each documented where it is defined; only
    :func:`kernels` hands them out, once the codec is loaded for their calls)."""

    compress_rows: Any
    compress_into: Any
    decompress_check: Any
    gather_compressed: Any
    decode_stacks: Any


@njit(cache=True, nogil=True)
def _compress_rows(rows: np.ndarray, scratch: np.ndarray, lengths: np.ndarray) -> None:
    """Compresses each row of ``rows`` into ``scratch[i]``; its size into ``lengths``."""
    for i in range(rows.shape[0]):
        lengths[i] = _compress(
            rows[i].ctypes.data, scratch[i].ctypes.data, rows.shape[1], scratch.shape[1]
        )


@njit(cache=True, nogil=True)
def _compress_into(
    rows: np.ndarray, blobs: np.ndarray, slots: np.ndarray, lengths: np.ndarray
) -> None:
    """Compresses row ``i`` into ``blobs[slots[i]]``; its size into ``lengths[slots[i]]``."""
    for i in range(rows.shape[0]):
        slot = slots[i]
        lengths[slot] = _compress(
            rows[i].ctypes.data, blobs[slot].ctypes.data, rows.shape[1], blobs.shape[1]
        )


@njit(cache=True, nogil=True)
def _decompress_check(
    data: np.ndarray, offsets: np.ndarray, nbytes: int, scratch: np.ndarray
) -> int:
    """Index of the first blob ``data[offsets[i]:offsets[i+1]]`` that does not decode
    to exactly ``nbytes`` bytes, or -1 if all do."""
    for i in range(offsets.size - 1):
        start, end = offsets[i], offsets[i + 1]
        if end <= start or end > data.size:
            return i
        got = _decompress(data[start:].ctypes.data, scratch.ctypes.data, end - start, nbytes)
        if got != nbytes:
            return i
    return -1


@njit(cache=True, nogil=True)
def _gather_compressed(
    arena: np.ndarray,
    positions: np.ndarray,
    lengths: np.ndarray,
    prev: np.ndarray,
    heads: np.ndarray,
    stack: int,
    out: np.ndarray,
) -> None:
    """As ``frame_kernels.gather_stacks``, decoding each frame from ``arena``."""
    capacity = arena.size
    nbytes = out.shape[2]
    total = heads.size * stack
    chains = np.empty((heads.size, stack), dtype=np.int64)
    chain_slots(prev, heads, stack, chains, 0)
    frames = chains.reshape(-1)
    base = arena.ctypes.data
    for i in range(total):
        if i + FRAMES_AHEAD < total:
            ahead = frames[i + FRAMES_AHEAD]
            prefetch_range(base, positions[ahead] % capacity, lengths[ahead])
        frame = frames[i]
        start = positions[frame] % capacity
        _decompress(
            arena[start:].ctypes.data,
            out[i // stack, i % stack].ctypes.data,
            lengths[frame],
            nbytes,
        )


@njit(cache=True, nogil=True)
def _decode_stacks(
    data: np.ndarray, offsets: np.ndarray, index: np.ndarray, out: np.ndarray
) -> int:
    """``out[b, j]`` = blob ``index[b, j]`` decoded: stacks straight from a packed
    payload (no buffer of distinct frames between). The first blob that does not
    decode to one frame, or -1."""
    width, nbytes = index.shape[1], out.shape[2]
    base = data.ctypes.data
    total = index.shape[0] * width
    for i in range(total):
        if i + FRAMES_AHEAD < total:
            ahead = index[(i + FRAMES_AHEAD) // width, (i + FRAMES_AHEAD) % width]
            prefetch_range(base, offsets[ahead], offsets[ahead + 1] - offsets[ahead])
        b, j = i // width, i % width
        blob = index[b, j]
        start, end = offsets[blob], offsets[blob + 1]
        if end <= start or end > data.size:
            return blob
        got = _decompress(data[start:].ctypes.data, out[b, j].ctypes.data, end - start, nbytes)
        if got != nbytes:
            return blob
    return -1


@functools.lru_cache(maxsize=1)
def kernels() -> Lz4Kernels:
    """The numba kernels bound to the C codec (loaded first, so that their calls resolve).

    Raises:
        CodecUnavailable: lz4 is not installed.
    """
    _library()
    return Lz4Kernels(
        _compress_rows, _compress_into, _decompress_check, _gather_compressed, _decode_stacks
    )
