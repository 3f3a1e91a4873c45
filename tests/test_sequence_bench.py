"""``apex bench shard``'s R2D2 cases (``bench.parts.sequence_cases``) on a small store: what
they measure is there, in the units the report states, and adds up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import report
from bench.parts.shard_worker import sequence_spec
from launch.cli import main


@pytest.mark.slow
def test_the_sequence_cases_time_batches_of_64_by_80_and_measure_a_filled_store(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sequences.json"
    arguments = [
        "bench",
        "shard",
        "--quick",
        "--part",
        "sequences",
        "--repeats",
        "2",
        "--seconds",
        "0.25",
        "--json",
        str(out),
    ]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    records = {(r["case"], r["metric"]): r for r in document["records"]}
    assert {case for case, _ in records} == {"store-sequences", "sample-sequences-1shard"}
    assert all(r["status"] == "ok" for r in document["records"]), document["records"]
    spec = sequence_spec()
    store = records[("store-sequences", "sample_time")]
    assert store["params"]["sequence_length"] == 80 and store["params"]["batch_size"] == 64
    assert store["params"]["item_nbytes"] == spec.item_nbytes
    assert store["params"]["stored_steps"] == 80_000 == 80 * store["params"]["sequences"]
    assert store["repeats"] == 2 and 0 < store["min"] <= store["median"] <= store["max"]
    assert records[("store-sequences", "sample_and_update_time")]["median"] > 0
    # The process holds its store: RSS is at least the store's arrays, once filled.
    rss = records[("store-sequences", "rss")]["median"]
    assert rss >= store["params"]["store_nbytes"] >= 1_000 * spec.item_nbytes
    per_million = records[("store-sequences", "rss_per_million_steps")]["median"]
    assert per_million == pytest.approx(rss / 0.08)
    served = records[("sample-sequences-1shard", "ready_batches")]
    assert served["params"]["batch_size"] == 64 and served["params"]["fill_per_shard"] == 1_000
    assert served["median"] > 0
    assert records[("sample-sequences-1shard", "ingest_while_sampling")]["median"] > 0
    assert "store-sequences" in result.output  # the markdown table
