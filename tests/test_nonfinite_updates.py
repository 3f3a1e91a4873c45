"""A batch holding a NaN or an infinity: the update is skipped on the device (Adam's
``found_inf``), counted, sends no priorities and publishes nothing; a run of them ends the
run with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import zmq

from apex.algorithms.optimizer import Adam
from apex.algorithms.updates import descend
from apex.weights import WeightSubscriber
from tests.test_learner import LocalSource, filled_store, make_learner


class PoisonedSource(LocalSource):
    """Batches of ``LocalSource`` with a NaN reward or an infinite observation in those
    whose number (from 0) ``poisoned`` holds; every batch when it is None."""

    def __init__(self, source: LocalSource, poisoned: set[int] | None) -> None:
        super().__init__(source.store, source.stage)
        self.poisoned = poisoned
        self.batches = 0

    def next_batch(self, timeout_s: float = 10.0):
        batch = super().next_batch(timeout_s)
        if self.poisoned is None or self.batches in self.poisoned:
            if self.batches % 2:
                batch.transitions["reward"][3] = float("nan")
            else:
                batch.transitions["obs"][5, 1] = float("inf")
        self.batches += 1
        return batch


def poisoned_learner(tmp_path: Path, poisoned: set[int] | None, **settings):
    learner = make_learner(tmp_path, filled_store(np.random.default_rng(0)), **settings)
    learner.source = PoisonedSource(learner.source, poisoned)
    return learner


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
def test_adam_skips_a_step_whole_where_found_inf_is_set(fused: bool) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    optimizer = Adam(layer.parameters(), lr=0.1, fused=fused)
    inputs = torch.randn(8, 4)
    descend(optimizer, layer(inputs).square().mean(), layer.parameters(), 40.0)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    moments = json.dumps({k: str(v) for k, v in optimizer.state_dict()["state"].items()})
    poisoned = inputs.clone()
    poisoned[2, 0] = float("nan")
    skipped = descend(optimizer, layer(poisoned).square().mean(), layer.parameters(), 40.0)
    assert float(skipped) == 1.0
    for name, value in layer.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert json.dumps({k: str(v) for k, v in optimizer.state_dict()["state"].items()}) == moments
    # The next finite step is the second one, as if the skipped one never was.
    assert float(descend(optimizer, layer(inputs).square().mean(), layer.parameters(), 40.0)) == 0
    assert all(float(s["step"]) == 2 for s in optimizer.state_dict()["state"].values())
    assert not torch.equal(layer.weight, before["weight"])


def test_a_non_finite_batch_is_skipped_counted_and_sends_no_priorities(tmp_path: Path) -> None:
    learner = poisoned_learner(tmp_path, poisoned={3, 8}, max_updates=20)
    outcome = learner.run()
    assert outcome.reason == "max_updates"
    assert outcome.counters.updates == 20 and outcome.counters.updates_skipped == 2
    assert learner.source.batches == 22 and learner.source.updates_sent == 20
    assert all(torch.isfinite(p).all() for p in learner.algorithm.online.parameters())
    assert np.isfinite(learner.source.store.tree.leaves).all()
    written = records(tmp_path)
    assert [r for r in written if r["event"] == "progress"][-1]["updates_skipped_nonfinite"] == 2
    assert written[-1]["event"] == "end" and written[-1]["updates_skipped_nonfinite"] == 2


def test_a_run_of_non_finite_batches_ends_the_run_and_publishes_nothing(tmp_path: Path) -> None:
    learner = poisoned_learner(tmp_path, poisoned=None, max_skipped_updates=5, max_updates=50)
    initial = {k: v.clone() for k, v in learner.algorithm.policy.state_dict().items()}
    context = zmq.Context()
    subscriber = WeightSubscriber(context, learner.weights_endpoint)
    try:
        outcome = learner.run()
    finally:
        subscriber.close()
        context.term()
    assert outcome.reason.startswith("non-finite training: 5 updates in a row")
    assert outcome.counters.updates == 0 and outcome.counters.updates_skipped == 5
    assert learner.source.updates_sent == 0
    assert outcome.counters.weight_version == 1  # the initial weights' publication only
    for name, value in learner.algorithm.policy.state_dict().items():
        assert torch.equal(value, initial[name]), name
    end = records(tmp_path)[-1]
    assert end["reason"] == outcome.reason and end["updates_skipped_nonfinite"] == 5
