"""A live shard under hostile messages on both endpoints (``bench.faults.fuzz_suite``): bounded
here to a few thousand per endpoint; ``apex bench fuzz`` runs 100,000 and more."""

from __future__ import annotations

import numpy as np
import pytest

from bench.faults.fuzz_messages import HostileMessages
from bench.faults.fuzz_suite import SPEC, run_fuzz
from replay.errors import ReplayError
from replay.server.config import ShardConfig
from replay.server.ingest import Ingest
from replay.wire.layout import Kind, decode


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_fuzzed_shard_survives_counts_every_reject_and_keeps_every_valid_transition(
    seed: int,
) -> None:
    outcome = run_fuzz(3000, seed=seed)
    failed = [name for name, passed in outcome["checks"].items() if not passed]
    assert not failed, (failed, {k: v for k, v in outcome.items() if k != "checks"})
    # Every case of both endpoints was exercised.
    cases = {name.split("/")[1] for name in outcome["cases"]}
    make = HostileMessages(SPEC, np.random.default_rng(0))
    assert cases == set(make.insert_cases) | set(make.request_cases)
    # The descriptor-level fuzz reached past decoding on every endpoint: some of its
    # messages were valid enough to be stored, taken or loaded.
    descriptor = outcome["descriptor"]
    assert descriptor["shard"]["inserts_stored"] > 0, descriptor
    assert descriptor["learner_episodes"]["taken"] > 0, descriptor
    assert descriptor["actor_weights"]["loaded"] > 0, descriptor


def test_no_hostile_insert_case_can_be_taken_by_a_store() -> None:
    """Each case is malformed by construction: the shard's own decoding and ingest
    refuse every one (what the live fuzz's exact accounting relies on)."""
    make = HostileMessages(SPEC, np.random.default_rng(7))
    ingest = Ingest(ShardConfig(spec=SPEC, capacity=100_000))
    for name, case in make.insert_cases.items():
        for _ in range(100):
            frames = case()
            with pytest.raises(ReplayError):
                message = decode(frames)
                if message.kind not in (Kind.INSERT, Kind.INSERT_FRAMES):
                    raise ReplayError(f"{message.kind.name} on an insert socket")
                ingest.take(message)
            assert ingest.replay.size == 0, name


@pytest.mark.slow
def test_the_fuzz_benchmark_command_writes_its_checks(tmp_path) -> None:
    import json

    from click.testing import CliRunner

    from bench import report
    from launch.cli import main

    out = tmp_path / "fuzz.json"
    result = CliRunner().invoke(main, ["bench", "fuzz", "--messages", "500", "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert report.validate(document) == []
    assert all(document["suites"]["fuzz"]["config"]["checks"].values())
    assert "pass  every_valid_transition_present" in result.output
