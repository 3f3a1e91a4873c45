"""Snapshots on disk: raw arrays and a JSON manifest in a directory, made whole atomically.

Layout under a snapshot root::

    snapshot-000012/        a complete snapshot
        manifest.json       format, version, meta, and per array: file, dtype, shape, crc32
                            and, for an array written in part, its row ranges
        00-<name>.bin       the array's bytes in C order (its ranges' rows, one after
                            another, for an array written in part)
    .partial-000013/        one being written; never read, removed when found stale

A snapshot is written under a ``.partial-`` name, every file and the directory fsynced,
then renamed to its final name (atomic on POSIX) and the root fsynced. So a snapshot under
its final name is always complete; a crash or a full disk leaves only a partial
directory, and the previous snapshot stays. The newest ``keep`` complete snapshots are
kept; older ones go once a new one is complete.

A snapshot is sized by what a store holds, not by what it could hold: a store names the
rows of each array that are in use (:class:`Rows`, e.g. the first ``size`` slots of a ring
that has not wrapped), only those are written, and a restore reads them back into the same
rows of a freshly built store, whose other rows keep their initial values. Version 1
snapshots (whole arrays only) are still read.

Nothing is pickled. A manifest is a file someone else may have written: its format,
version, array names, dtypes (plain numbers and bools only), shapes and sizes are checked,
and every array's CRC-32 is checked as it is read. Any mismatch raises
:class:`SnapshotError` naming the snapshot and the problem; :func:`load_newest` then falls
back to the previous snapshot.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from replay.errors import ReplayError, SnapshotError
from replay.store.state import Rows
from replay.store.sum_tree import aligned_empty

FORMAT = "apex-replay-snapshot"
VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
_COMPLETE = re.compile(r"^snapshot-(\d{6,})$")
_NAME = re.compile(r"^[a-z0-9_.]{1,64}$")
_CHUNK = 64 << 20  # bytes read (and checksummed) at a time
_WRITE_CHUNK = 4 << 20
_MAX_MANIFEST_BYTES = 16 << 20


@dataclass(frozen=True)
class ArrayEntry:
    file: str
    dtype: np.dtype
    shape: tuple[int, ...]
    crc32: int
    ranges: tuple[tuple[int, int], ...] | None = None
    """The rows written (None: the whole array)."""

    @property
    def row_nbytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        if self.ranges is None:
            return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        return sum(stop - start for start, stop in self.ranges) * self.row_nbytes


@dataclass(frozen=True)
class Snapshot:
    """A complete snapshot on disk, its manifest checked; arrays are read on demand."""

    path: Path
    sequence: int
    meta: dict
    arrays: dict[str, ArrayEntry]

    def read(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Array ``name``, read into ``out`` (same dtype and shape) or a new array.

        Raises:
            SnapshotError: unknown name, a mismatched ``out``, a short file or a bad CRC.
        """
        entry = self.arrays.get(name)
        if entry is None:
            raise SnapshotError(f"{self.path}: no array {name!r}")
        if out is None:
            # Rows not written read as zeros; a store passes its own array to keep its own.
            out = (np.empty if entry.ranges is None else np.zeros)(entry.shape, entry.dtype)
        elif out.dtype != entry.dtype or out.shape != entry.shape or not out.flags.c_contiguous:
            raise SnapshotError(
                f"{self.path}: {name} is {entry.dtype}{entry.shape}, this store holds "
                f"{out.dtype}{out.shape}"
            )
        flat = out.reshape(-1).view(np.uint8)
        row = entry.row_nbytes
        pieces = (
            [(0, flat.size)]
            if entry.ranges is None
            else [(start * row, stop * row) for start, stop in entry.ranges]
        )
        crc = 0
        # Straight into the store's own rows: no second copy of the snapshot in memory,
        # and rows never written stay untouched (pages never faulted in).
        with open(self.path / entry.file, "rb") as file:
            for first, last in pieces:
                view = memoryview(flat[first:last])
                for start in range(0, last - first, _CHUNK):
                    part = view[start : start + _CHUNK]
                    if file.readinto(part) != len(part):
                        raise SnapshotError(f"{self.path}: {entry.file} is truncated")
                    crc = zlib.crc32(part, crc)
        if crc != entry.crc32:
            raise SnapshotError(f"{self.path}: {entry.file} fails its checksum (corrupted)")
        return out


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class _Pace:
    """Keeps a writer under ``bytes_per_s`` (None: as fast as it goes). A background
    snapshot streams the whole store through the caches it shares with the serving loop;
    spread out, it costs that loop's tail latency much less."""

    def __init__(self, bytes_per_s: float | None) -> None:
        self._rate = bytes_per_s
        self._started = time.monotonic()
        self._done = 0

    def wrote(self, nbytes: int) -> None:
        self._done += nbytes
        if self._rate:
            ahead = self._done / self._rate - (time.monotonic() - self._started)
            if ahead > 0:
                time.sleep(ahead)


_DIRECT_ALIGN = 4096


def _write_direct(path: Path, pieces: list[memoryview], pace: _Pace) -> int | None:
    """Writes ``pieces`` one after another with ``O_DIRECT`` (no page cache: the I/O is
    done by this process, not by the kernel's writeback threads that the serving shard
    shares its cores with); returns the CRC-32, or None where the file system refuses
    ``O_DIRECT`` (tmpfs)."""
    direct = getattr(os, "O_DIRECT", 0)  # Linux
    if not direct:
        return None
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | direct, 0o644)
    except OSError:
        return None
    bounce = aligned_empty(_WRITE_CHUNK, np.uint8, _DIRECT_ALIGN)
    crc, filled, written = 0, 0, 0

    def flush(nbytes: int) -> None:
        nonlocal written
        if os.write(descriptor, memoryview(bounce)[:nbytes]) != nbytes:
            raise OSError(f"short write to {path}")
        written += nbytes

    try:
        for piece in pieces:
            for start in range(0, len(piece), _WRITE_CHUNK):
                part = piece[start : start + _WRITE_CHUNK]
                crc = zlib.crc32(part, crc)
                while len(part):  # through the aligned bounce buffer, full blocks out
                    take = min(len(part), _WRITE_CHUNK - filled)
                    bounce[filled : filled + take] = part[:take]
                    filled, part = filled + take, part[take:]
                    if filled == _WRITE_CHUNK:
                        flush(_WRITE_CHUNK)
                        filled = 0
                pace.wrote(min(_WRITE_CHUNK, len(piece) - start))
        total = written + filled
        if filled:
            padded = -(-filled // _DIRECT_ALIGN) * _DIRECT_ALIGN
            bounce[filled:padded] = 0
            flush(padded)
        os.ftruncate(descriptor, total)
        os.fsync(descriptor)
    except OSError as exc:
        if written == 0 and exc.errno == errno.EINVAL:  # O_DIRECT accepted, then refused
            return None
        raise
    finally:
        os.close(descriptor)
    return crc


def _pieces(array: np.ndarray | Rows) -> tuple[np.ndarray, list[memoryview], list | None]:
    """The array, the byte views a snapshot writes of it, and its ranges (None: whole)."""
    if isinstance(array, Rows):
        whole = np.ascontiguousarray(array.array)
        ranges = [[int(start), int(stop)] for start, stop in array.ranges]
        if not _rows_in_order(ranges, len(whole)):
            raise SnapshotError(f"rows {ranges} are not in order within {len(whole)}")
        views = [memoryview(whole[start:stop].reshape(-1).view(np.uint8)) for start, stop in ranges]
        return whole, views, ranges
    whole = np.ascontiguousarray(array)
    return whole, [memoryview(whole.reshape(-1).view(np.uint8))], None


def _write_array(path: Path, pieces: list[memoryview], pace: _Pace) -> int:
    crc = _write_direct(path, pieces, pace)
    if crc is not None:
        return crc
    crc = 0
    with open(path, "wb") as file:
        for data in pieces:
            for start in range(0, len(data), _WRITE_CHUNK):
                part = data[start : start + _WRITE_CHUNK]
                file.write(part)
                crc = zlib.crc32(part, crc)
                pace.wrote(len(part))
        file.flush()
        os.fsync(file.fileno())
    return crc


def complete_snapshots(root: Path) -> list[tuple[int, Path]]:
    """``(sequence, path)`` of the complete snapshots under ``root``, newest first."""
    if not root.is_dir():
        return []
    found = [
        (int(match.group(1)), path)
        for path in root.iterdir()
        if (match := _COMPLETE.match(path.name)) and path.is_dir()
    ]
    return sorted(found, reverse=True)


def write_snapshot(
    root: Path,
    sequence: int,
    arrays: Mapping[str, np.ndarray | Rows],
    meta: dict,
    keep: int = 2,
    bytes_per_s: float | None = None,
) -> Path:
    """Writes a complete snapshot ``root/snapshot-<sequence>``, at most ``bytes_per_s``
    fast if given; returns its path. An array given as :class:`Rows` is written in part.

    Raises:
        SnapshotError: a bad name, or the disk refused (full, read-only...): the partial
            directory is removed and earlier snapshots are untouched.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"snapshot-{sequence:06d}"
    partial = root / f".partial-{sequence:06d}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir()
        entries, pace = {}, _Pace(bytes_per_s)
        for number, (name, array) in enumerate(arrays.items()):
            if not _NAME.match(name):
                raise SnapshotError(f"array name {name!r} is not [a-z0-9_.]{{1,64}}")
            file = f"{number:02d}-{name}.bin"
            whole, pieces, ranges = _pieces(array)
            crc = _write_array(partial / file, pieces, pace)
            entries[name] = {
                "file": file,
                "dtype": whole.dtype.str,
                "shape": list(whole.shape),
                "crc32": crc,
            }
            if ranges is not None:
                entries[name]["ranges"] = ranges
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "sequence": sequence,
            "meta": meta,
            "arrays": entries,
        }
        with open(partial / MANIFEST, "w", encoding="utf-8") as file:
            json.dump(manifest, file)
            file.flush()
            os.fsync(file.fileno())
        _fsync_directory(partial)
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        _fsync_directory(root)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise SnapshotError(f"cannot write snapshot {final}: {exc}") from exc
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    for _, old in complete_snapshots(root)[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _entry(path: Path, name: object, raw: object) -> ArrayEntry:
    if not isinstance(name, str) or not _NAME.match(name) or not isinstance(raw, dict):
        raise SnapshotError(f"{path}: bad array entry {name!r}")
    file, dtype, shape, crc = (raw.get(key) for key in ("file", "dtype", "shape", "crc32"))
    if not isinstance(file, str) or "/" in file or file.startswith("."):
        raise SnapshotError(f"{path}: array {name} has a bad file name {file!r}")
    try:
        dtype = np.dtype(dtype) if isinstance(dtype, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf" or dtype.hasobject:
        raise SnapshotError(f"{path}: array {name} has an unsupported dtype {raw.get('dtype')!r}")
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise SnapshotError(f"{path}: array {name} has a bad shape {shape!r}")
    if not isinstance(crc, int) or not 0 <= crc < 2**32:
        raise SnapshotError(f"{path}: array {name} has a bad checksum {crc!r}")
    entry = ArrayEntry(file, dtype, tuple(shape), crc, _ranges(path, name, raw, shape))
    size = (path / file).stat().st_size if (path / file).is_file() else -1
    if size != entry.nbytes:
        raise SnapshotError(
            f"{path}: {file} holds {size} bytes, its manifest says {entry.nbytes} (truncated?)"
        )
    return entry


def _rows_in_order(ranges: object, rows: int) -> bool:
    """Whether ``ranges`` is a list of ``[start, stop]`` integer pairs, each non-empty,
    in order and apart, within ``rows`` rows."""
    if not isinstance(ranges, list):
        return False
    end = 0
    for pair in ranges:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in pair)
            and end <= pair[0] < pair[1] <= rows
        ):
            return False
        end = pair[1]
    return True


def _ranges(path: Path, name: str, raw: dict, shape: list) -> tuple | None:
    """An entry's row ranges (None: the whole array)."""
    ranges = raw.get("ranges")
    if ranges is None:
        return None
    if not shape or not _rows_in_order(ranges, shape[0]):
        raise SnapshotError(f"{path}: array {name} has bad row ranges {ranges!r:.100}")
    return tuple((start, stop) for start, stop in ranges)


def open_snapshot(path: Path) -> Snapshot:
    """The snapshot at ``path``, its manifest and file sizes checked.

    Raises:
        SnapshotError: no manifest, not JSON, another format or version, bad entries.
    """
    manifest_path = path / MANIFEST
    try:
        if manifest_path.stat().st_size > _MAX_MANIFEST_BYTES:
            raise SnapshotError(f"{manifest_path} is larger than any manifest")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SnapshotError(f"{path}: not an {FORMAT}")
    if manifest.get("version") not in READABLE_VERSIONS:
        raise SnapshotError(
            f"{path}: snapshot version {manifest.get('version')!r}, this build reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    sequence, meta, arrays = (manifest.get(key) for key in ("sequence", "meta", "arrays"))
    if not isinstance(sequence, int) or not isinstance(meta, dict) or not isinstance(arrays, dict):
        raise SnapshotError(f"{path}: manifest lacks sequence, meta or arrays")
    entries = {name: _entry(path, name, raw) for name, raw in arrays.items()}
    return Snapshot(path, sequence, meta, entries)


def load_newest(root: Path, load: Callable[[Snapshot], None]) -> tuple[Snapshot | None, list[str]]:
    """Calls ``load`` on the newest complete snapshot under ``root`` that it accepts.

    ``load`` raises :class:`SnapshotError` (or :class:`ReplayError`) to refuse one; the
    next older one is then tried. Returns the snapshot loaded (None if none) and why each
    newer one was refused.
    """
    refused = []
    for _, path in complete_snapshots(root):
        try:
            snapshot = open_snapshot(path)
            load(snapshot)
        except ReplayError as exc:
            refused.append(str(exc))
            continue
        return snapshot, refused
    return None, refused
