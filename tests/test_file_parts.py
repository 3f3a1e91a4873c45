"""Files a run appends to stay bounded (apex.learning.file_parts): metrics.jsonl rotated by
its writer, role logs rotated under the process that writes them, and every reader still
reading every kept record in order."""

from __future__ import annotations

from pathlib import Path

from apex.learning.file_parts import KEPT_PARTS, SizeLimit, part, parts_oldest_first
from apex.learning.metrics import MetricsTail, MetricsWriter, read_metrics
from launch.config import resolve
from replay.errors import ConfigError


def _write(writer: MetricsWriter, first: int, count: int) -> None:
    for index in range(first, first + count):
        writer.write({"event": "progress", "index": index, "pad": "x" * 20})


def test_metrics_rotate_past_their_size_and_keep_three_older_parts(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, max_bytes=1_000)
    _write(writer, 0, 400)  # about 24 KB: many rotations
    writer.close()
    path = tmp_path / "metrics.jsonl"
    assert parts_oldest_first(path) == [part(path, n) for n in range(KEPT_PARTS, 0, -1)] + [path]
    assert not part(path, KEPT_PARTS + 1).exists()
    record_bytes = len(path.read_text().splitlines()[0]) + 1
    on_disk = sum(p.stat().st_size for p in parts_oldest_first(path))
    assert on_disk <= (KEPT_PARTS + 1) * (1_000 + record_bytes)
    indexes = [r["index"] for r in read_metrics(tmp_path)]
    # The newest records, none missing, none repeated, in the order written.
    assert indexes == list(range(indexes[0], 400))
    assert len(indexes) >= KEPT_PARTS * 1_000 // record_bytes


def test_a_tail_across_rotations_misses_nothing(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, max_bytes=2_000)
    tail = MetricsTail(tmp_path)
    seen = []
    for first in range(0, 300, 10):  # each round less than a part: one rotation at most
        _write(writer, first, 10)
        seen += [r["index"] for r in tail.read()]
    writer.close()
    assert seen == list(range(300))
    assert part(tmp_path / "metrics.jsonl", 1).exists()


def test_a_tail_started_late_reads_the_kept_parts_first(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, max_bytes=1_000)
    _write(writer, 0, 100)
    writer.close()
    assert [r["index"] for r in MetricsTail(tmp_path).read()] == [
        r["index"] for r in read_metrics(tmp_path)
    ]


def test_a_log_held_open_by_its_writer_is_rotated_under_it(tmp_path: Path) -> None:
    log = tmp_path / "actor-0.log"
    limit = SizeLimit(max_bytes=100, every_s=0.0)
    with open(log, "ab", buffering=0) as role_stderr:  # as a child's stderr: append mode
        role_stderr.write(b"a" * 150 + b"\n")
        limit.tend([log, tmp_path / "gone.log"], now=1.0)
        role_stderr.write(b"after rotation\n")
    assert part(log, 1).read_bytes() == b"a" * 150 + b"\n"
    # The writer's next line lands at the start, not after a hole the size of the old file.
    assert log.read_bytes() == b"after rotation\n"
    assert limit.rotations == 1
    limit.tend([log], now=2.0)  # under the limit: left alone
    assert limit.rotations == 1


def test_the_size_limits_are_settings_checked_with_the_rest() -> None:
    config = resolve({"log_max_mb": 8, "learner": {"metrics_max_mb": 16}}, sized=False)
    assert (config.log_max_mb, config.learner.metrics_max_mb) == (8, 16)
    try:
        resolve({"log_max_mb": 0, "learner": {"metrics_max_mb": -1}}, sized=False)
    except ConfigError as exc:
        assert "log_max_mb must be finite and > 0, got 0" in exc.problems
        assert "learner.metrics_max_mb must be finite and > 0, got -1" in exc.problems
    else:
        raise AssertionError("a size of 0 was accepted")
