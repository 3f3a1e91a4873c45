"""The sampler's view of one shard: outages, probes and counters, without sockets."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from replay.sampling.shard_health import ShardHealth

PROBE_S, INFO_S = 0.5, 1.0


def test_an_outage_is_counted_once_and_timed_until_the_shard_answers() -> None:
    health = ShardHealth(2, "tcp://x:1", total=5.0)
    health.mark_down(10.0, "no reply", PROBE_S)
    health.mark_down(10.5, "still no reply", PROBE_S)
    assert not health.alive and health.outages == 1 and health.mass == 0.0
    assert health.state(11.0)["down_s"] == pytest.approx(1.0)
    health.answered(12.0)
    assert health.alive and health.replies == 1 and health.mass == 5.0
    assert health.state(20.0)["down_s"] == pytest.approx(2.0)


def test_down_and_empty_shards_are_probed_and_every_shard_reports_periodically() -> None:
    health = ShardHealth(0, "tcp://x:1")
    assert health.wants_info(0.0)  # empty: only INFO can show it filling
    health.asked_info(0.0, PROBE_S, INFO_S, 0)
    assert not health.wants_info(0.4) and health.wants_info(0.5)
    health.apply_info(
        {"total_priority": 3.0, "size": 7, "min_priority": 0.25, "transitions_added": 7}, 0.6, 0
    )
    assert health.info_asked_at == 0.0 and not health.info_asks
    health.asked_info(0.6, PROBE_S, INFO_S, 1)
    assert health.usable and not health.wants_info(1.5) and health.wants_info(1.6)
    assert (health.total, health.size, health.min_positive, health.info_at) == (3.0, 7, 0.25, 0.6)
    health.apply_info({"total_priority": 0.0, "size": 0, "min_priority": None}, 2.0)
    assert health.min_positive == math.inf and not health.usable


def test_a_sample_held_by_the_rate_limiter_is_a_wait_not_an_outage() -> None:
    health = ShardHealth(0, "tcp://x:1", total=5.0)
    counters = {"total_priority": 5.0, "size": 7, "min_priority": 1.0}
    # Asked before the request, answered after it: it may not have seen the request yet.
    health.asked_info(1.5, PROBE_S, INFO_S, 0)
    health.apply_info({**counters, "samples_waiting": 1}, 2.5, 0)
    assert health.info_at == 2.5 and not health.holds_for_limiter(2.0)
    health.asked_info(3.0, PROBE_S, INFO_S, 1)
    health.apply_info({**counters, "samples_waiting": 0}, 3.1, 1)
    assert not health.holds_for_limiter(2.0)  # it answers but holds nothing of ours
    health.asked_info(4.0, PROBE_S, INFO_S, 2)
    health.apply_info({**counters, "samples_waiting": 2}, 4.1, 2)
    assert health.holds_for_limiter(2.0) and health.holds_for_limiter(2.0)
    assert health.alive and health.outages == 0 and health.limiter_waits == 1
    health.apply_sample(SimpleNamespace(total_priority=6.0, min_priority=1.0, size=8))
    assert not health.held_by_limiter and health.holds_for_limiter(2.0)
    assert health.limiter_waits == 2  # one per wait
    health.mark_down(5.0, "no reply", PROBE_S)
    assert not health.holds_for_limiter(2.0)  # a shard already down stays down


def test_infos_asked_and_not_answered_are_remembered_in_order() -> None:
    health = ShardHealth(0, "tcp://x:1")
    for sequence, at in enumerate((1.0, 2.0, 3.0)):
        health.asked_info(at, PROBE_S, INFO_S, sequence)
    health.asked_info(3.5, PROBE_S, INFO_S, None)  # the queue was full: nothing to wait for
    assert health.info_unanswered_since(1.5) == 2.0 and health.info_unanswered_since(4) is None
    # Replies come in order: the answer to request 1 means request 0's was lost.
    health.apply_info({"total_priority": 1.0, "size": 1, "min_priority": 1.0}, 3.2, 1)
    assert health.info_asked_at == 2.0 and list(health.info_asks) == [2]
    assert health.info_unanswered_since(0.0) == 3.0
    for sequence in range(3, 3 + 200):  # a shard that never answers: a bounded memory
        health.asked_info(4.0 + sequence, PROBE_S, INFO_S, sequence)
    assert len(health.info_asks) <= 64
