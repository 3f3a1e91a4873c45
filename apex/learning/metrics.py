"""Run metrics: one JSON object per line in ``metrics.jsonl`` of the run directory, plus
TensorBoard scalars when ``torch.utils.tensorboard`` can be imported."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path

logger = logging.getLogger(__name__)


class MetricsWriter:
    """Appends records to ``metrics.jsonl``. A record that cannot be written (a full disk)
    is counted in ``dropped`` and logged once, never raised: metrics must not stop
    training."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
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
    """Every record of a run's ``metrics.jsonl`` (lines that do not parse are skipped)."""
    path = run_dir / "metrics.jsonl"
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


class MetricsTail:
    """Follows a run's ``metrics.jsonl`` as it grows: each call to :meth:`read` parses
    only what was appended since the last (a long run's file is megabytes; a view that
    redraws every second must not parse it all again). A line still being written is
    kept until its end arrives."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._offset = 0
        self._partial = b""

    def read(self) -> list[dict]:
        """The records appended since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return []
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
        return records
