"""An actor that waits on its shards (they take nothing) still tells the learner it lives."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import zmq

from apex.acting.actor import Actor, ActorEndpoints
from apex.algorithms.registry import build_acting, default_sections
from apex.channels import HEARTBEAT_S, ApexKind
from apex.envs.families import env_shape
from apex.settings import ActorConfig
from replay.server.credit_desk import MAX_WINDOW
from replay.wire.layout import decode
from tests.conftest import ShardProcess, info, wait_for


def _steadily_blocked(actor: Actor, context: zmq.Context, shard: ShardProcess):
    """True once the shard's limiter holds its inserts and the actor has since timed out
    on its inserts three times with nothing sent between. Timeouts alone are not enough:
    on a loaded machine a shard still taking its first batches answers late too, and the
    actor then sends more once it does."""
    seen = {"sent": -1, "waits": 0}

    def blocked() -> bool:
        if actor.transitions_sent != seen["sent"] or not info(context, shard)["inserts_waiting"]:
            seen["sent"], seen["waits"] = actor.transitions_sent, actor.insert_waits
            return False
        return actor.insert_waits - seen["waits"] >= 3

    return blocked


@pytest.mark.slow
def test_a_blocked_actor_keeps_sending_heartbeats() -> None:
    # Nothing samples: the limiter stops inserts after about 600 transitions.
    shard = ShardProcess(
        "--capacity",
        "10000",
        "--min-size",
        "100",
        "--samples-per-insert",
        "1",
        "--error-buffer",
        "500",
    )
    context = zmq.Context()
    episodes = context.socket(zmq.PULL)
    endpoint = f"tcp://127.0.0.1:{episodes.bind_to_random_port('tcp://127.0.0.1')}"
    config = ActorConfig(env="CartPole-v1", envs_per_actor=2, insert_batch=50, seed=1)
    acting = build_acting(config, default_sections(), env_shape(config.env))
    actor = Actor(config, acting, ActorEndpoints((shard.endpoints,), "tcp://127.0.0.1:1", endpoint))
    runner = threading.Thread(target=actor.run, daemon=True)
    runner.start()
    try:
        blocked = _steadily_blocked(actor, context, shard)
        wait_for(blocked, timeout_s=60, what="the actor to be blocked", interval_s=0.05)
        heard, sent = [], actor.transitions_sent
        while episodes.poll(0):  # what it said before it was blocked
            episodes.recv_multipart()
        deadline = time.monotonic() + 5 * HEARTBEAT_S
        while time.monotonic() < deadline:
            if episodes.poll(100):
                message = decode(episodes.recv_multipart(), kinds=ApexKind)
                heard.append((time.monotonic(), message.kind))
        # What bounds the actor is its credit, not the moment it first waited: it may
        # send on until the batches the shard has not taken fill the window the shard
        # grants a lone sender (MAX_WINDOW of CartPole's small batches); a failure in CI
        # saw 9,668 transitions more after the check above, 12,882 in all. Unblocked, it
        # would send thousands a second for as long as it ran.
        state = info(context, shard)
        assert state["inserts_waiting"]
        taken = state["transitions_added"]
        assert taken <= 700, taken  # the limiter's budget: 100 · 1 + 500, and a batch
        assert actor.transitions_sent <= taken + MAX_WINDOW * config.insert_batch, (
            actor.transitions_sent,
            sent,
        )
        assert len(heard) >= 3, heard  # a heartbeat about every second while blocked
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(heard)]
        assert max(gaps) < 3 * HEARTBEAT_S, gaps
    finally:
        actor.stop()
        runner.join(30)
        episodes.close(linger=0)
        shard.stop()
        context.term()
    assert not runner.is_alive()
