"""Software prefetch for numba kernels that copy frames from random places.

Putting stacks together reads thousands of 7 KB frames from random arena positions. The
hardware prefetcher follows a stream only within a 4 KB page and must first see a few
misses, so each frame starts cold. Asking for the next frames' cache lines while the
current one is copied (LLVM's ``llvm.prefetch``) overlaps those misses with the copy: a
batch of 512 Pong stacks gathered 1.4-1.5× faster on one thread (``bench/RESULTS.md``).
A prefetch is only a hint: it never faults and never changes a result.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

CACHE_LINE = 64
# Frames asked for ahead of the one being copied.
FRAMES_AHEAD = 4


@intrinsic
def _prefetch(typingctx, address):
    """Prefetches the cache line at integer ``address`` for reading."""
    signature = types.void(types.uintp)

    def codegen(context, builder, signature, args):
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
            "llvm.prefetch.p0i8",
        )
        # Read; locality 0 (the frame is read once: keep it out of the way); data cache.
        builder.call(function, [builder.inttoptr(args[0], byte_pointer), i32(0), i32(0), i32(1)])
        return context.get_dummy_value()

    return signature, codegen


@njit(cache=True, nogil=True, inline="always")
def prefetch_range(base: int, start: int, nbytes: int) -> None:
    """Prefetches the cache lines of bytes ``[start, start + nbytes)`` after address
    ``base``."""
    for offset in range(0, nbytes, CACHE_LINE):
        _prefetch(base + start + offset)
