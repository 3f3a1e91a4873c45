"""Run metrics: one JSON object per line in ``metrics.jsonl`` of the run directory, plus
TensorBoard scalars when ``torch.utils.tensorboard`` can be imported. Past its size limit
the file is rotated (``apex.learning.file_parts``); the readers here read every part."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path

from apex.learning.file_parts import part, parts_oldest_first, rotate_renaming

logger = logging.getLogger(__name__)


METRICS_FILE = "metrics.jsonl"


class MetricsWriter:
    """Appends records to ``metrics.jsonl``, rotated once past ``max_bytes`` (None: never).
    A record that cannot be written (a full disk) is counted in ``dropped`` and logged
    once, never raised: metrics must not stop training."""

    def __init__(self, run_dir: Path, max_bytes: int | None = None) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / METRICS_FILE
        self.max_bytes = max_bytes
        self.dropped = 0
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._tensorboard = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:
            logger.debug("tensorboard not installed; metrics go to %s only", self.path)

    def write(self, record: dict) -> None:
        """Appends ``record`` with its wall-clock time (``unix_s``) added."""
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()
        }
        try:
            self._file.write(json.dumps({**clean, "unix_s": round(time.time(), 3)}) + "\n")
            self._file.flush()
            if self.max_bytes is not None and self._file.tell() > self.max_bytes:
                self._file.close()
                rotate_renaming(self.path)
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            self.dropped += 1
            if self.dropped == 1:
                logger.error("metrics record not written (%s); counting the ones dropped", exc)
            return
        if self._tensorboard is not None:
            step = int(record.get("updates", 0))
            for key, value in clean.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tensorboard.add_scalar(key, value, step)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # what is still buffered, on a full disk
            self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()


def read_metrics(run_dir: Path) -> list[dict]:
    """Every record of a run's ``metrics.jsonl`` and its kept older parts, oldest first
    (lines that do not parse are skipped)."""
    records = []
    for path in parts_oldest_first(run_dir / METRICS_FILE):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # rotated away while read: a part lost
            continue
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


class MetricsTail:
    """Follows a run's ``metrics.jsonl`` as it grows: the first call to :meth:`read` parses
    the kept older parts and the file, each later one only what was appended since (a
    long run's file is megabytes; a view that redraws every second must not parse it all
    again). A line still being written is kept until its end arrives; when the file was
    rotated since, the rest of the part it became is read first."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / METRICS_FILE
        self._file_id: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._started = False

    def read(self) -> list[dict]:
        """The records appended since the last call."""
        if not self._started:
            self._started = True
            older = [p for p in parts_oldest_first(self.path) if p != self.path]
            chunk = b"".join(_read_from(p, 0) for p in older)
            self._partial = chunk[: chunk.rfind(b"\n") + 1]  # whole lines only
        try:
            status = os.stat(self.path)
        except OSError:
            return self._parse(b"")
        file_id = (status.st_dev, status.st_ino)
        if self._file_id is not None and file_id != self._file_id:
            self._partial += self._rest_of_rotated()
            self._offset = 0
        self._file_id = file_id
        chunk = _read_from(self.path, self._offset)
        self._offset += len(chunk)
        return self._parse(chunk)

    def _rest_of_rotated(self) -> bytes:
        """What the file held past our offset when it became part 1."""
        rotated = part(self.path, 1)
        try:
            status = os.stat(rotated)
        except OSError:
            return b""
        if (status.st_dev, status.st_ino) != self._file_id:
            return b""  # rotated more than once since: those records are missed
        return _read_from(rotated, self._offset)

    def _parse(self, chunk: bytes) -> list[dict]:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
        return records


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read()
    except OSError:
        return b""
