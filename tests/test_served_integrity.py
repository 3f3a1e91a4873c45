"""What a live shard serves after priority updates that name nothing it holds: on a
prioritized, a queue and a frame shard, over real TCP, every sampled row is one that was
inserted, and every dropped update is counted by its reason."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from apex.acting.frame_writer import FrameWriter
from replay.frames.spec import FrameStackSpec
from replay.inserts.client import InsertClient
from replay.inserts.endpoints import ShardEndpoints
from replay.protocol.requests import RequestClient
from replay.server.config import ShardConfig
from replay.server.shard import ShardServer
from replay.store.spec import TransitionSpec
from tests.conftest import SMALL_SPEC, STOP_TIMEOUT_S, make_batch, wait_for

STORED = 8
CAPACITY = 4096
# The reviewer's update, then one of each other kind a shard must not apply: slots past
# the capacity, generations past the newest item, and priorities that are not numbers.
FORGED_UPDATES = [
    (np.arange(1000, 1064), np.full(64, -1), np.full(64, 1e6), "never_written"),
    (
        np.arange(CAPACITY, CAPACITY + 8),
        np.arange(CAPACITY, CAPACITY + 8),
        np.ones(8),
        "out_of_range",
    ),
    (np.arange(4), np.arange(4) + 10**9, np.full(4, 1e6), "never_written"),
    (np.arange(4), np.arange(4), np.array([np.nan, np.inf, -1.0, -np.inf]), "bad_priority"),
]

QUEUE_SPEC = TransitionSpec.from_dict(
    {"obs": ((4,), "float32"), "action": ((), "int64"), "reward": ((), "float32")}
)


class ServingShard:
    """A :class:`ShardServer` serving in a thread of this process."""

    def __init__(self, config: ShardConfig) -> None:
        self.server = ShardServer(config)
        self.endpoints = ShardEndpoints(self.server.insert_endpoint, self.server.request_endpoint)
        self._thread = threading.Thread(target=self.server.serve, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.stop()
        self._thread.join(STOP_TIMEOUT_S)
        assert not self._thread.is_alive()


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@contextlib.contextmanager
def served(config: ShardConfig, context: zmq.Context, insert) -> Iterator[RequestClient]:
    """A serving shard that holds what ``insert(client)`` sent; a learner's client."""
    shard = ServingShard(config)
    inserts = InsertClient(context, [shard.endpoints], sender=5, spec=config.spec, timeout_s=5)
    requests = RequestClient(context, shard.endpoints.request, sender=9, timeout_s=5)
    try:
        insert(inserts)
        assert inserts.flush(10)
        wait_for(lambda: requests.info()["transitions_added"] == STORED, what="inserts stored")
        yield requests
    finally:
        inserts.close(0)
        requests.close()
        shard.stop()


def insert_tagged(spec: TransitionSpec):
    """Inserts ``STORED`` transitions whose every field holds its id, 100 and up."""
    return lambda client: client.insert(make_batch(spec, STORED, first_id=100), np.ones(STORED))


def send_forged_updates(requests: RequestClient) -> tuple[dict, dict]:
    """INFO before and after :data:`FORGED_UPDATES`: UPDATE has no reply, but the INFO
    asked after them on the same connection is answered once they were read."""
    before = requests.info()
    for indices, generations, priorities, _ in FORGED_UPDATES:
        requests.update(indices, generations, priorities)
    return before, requests.info()


def test_a_prioritized_shard_serves_only_what_was_inserted_after_forged_updates(
    context: zmq.Context,
) -> None:
    config = ShardConfig(spec=SMALL_SPEC, capacity=CAPACITY)
    with served(config, context, insert_tagged(SMALL_SPEC)) as requests:
        before, after = send_forged_updates(requests)
        assert after["updates_applied"] == before["updates_applied"] + len(FORGED_UPDATES)
        expected = {"out_of_range": 8, "never_written": 68, "stale": 0, "bad_priority": 4}
        assert after["updates_dropped"] == expected
        assert after["total_priority"] == pytest.approx(STORED)
        for _ in range(4):
            reply = requests.sample(64, 0.4, SMALL_SPEC)
            assert ((reply.indices >= 0) & (reply.indices < STORED)).all()
            assert ((reply.generations >= 0) & (reply.generations < STORED)).all()
            ids = reply.fields["action"]
            assert np.isin(ids, np.arange(100, 100 + STORED)).all()
            for name in SMALL_SPEC:  # every field of a row carries the row's id
                field = reply.fields[name].reshape(64, -1)
                np.testing.assert_array_equal(field, np.broadcast_to(ids[:, None], field.shape))


def test_a_queue_shard_refuses_every_update_and_hands_out_only_what_was_inserted(
    context: zmq.Context,
) -> None:
    spec = QUEUE_SPEC  # a queue checks discounts against [0, 1]: ids go elsewhere
    config = ShardConfig(spec=spec, capacity=CAPACITY, queue=True)
    with served(config, context, insert_tagged(spec)) as requests:
        before, after = send_forged_updates(requests)
        refused = after["rejected"].get("update", 0) - before["rejected"].get("update", 0)
        assert refused == len(FORGED_UPDATES)
        assert after["updates_applied"] == before["updates_applied"]
        reply = requests.sample(STORED, 0.0, spec)
        np.testing.assert_array_equal(np.sort(reply.fields["action"]), np.arange(100, 108))
        np.testing.assert_array_equal(reply.fields["obs"][:, 0], reply.fields["action"])
        assert requests.info()["size"] == 0  # each handed out once, nothing else queued


FRAME_SHAPE = (6, 5)
STACK = 4
SCALARS = TransitionSpec.from_dict(
    {"action": ((), "int64"), "reward": ((), "float32"), "discount": ((), "float32")}
)


def _frame_inserts(client: InsertClient, truth: dict[int, np.ndarray]) -> None:
    """``STORED`` one-step transitions of two env copies, ids in their rewards; ``truth``
    gets each id's ``obs`` stack (episodes start with their first frame repeated)."""
    rng = np.random.default_rng(4)
    writer = FrameWriter(2, STACK, 1, history=32, compress=True, rng=rng, frame_shape=FRAME_SHAPE)
    history: list[list[np.ndarray]] = [[], []]
    numbers = [[], []]
    for step in range(STORED // 2 + 1):
        frames = rng.integers(0, 256, (2, *FRAME_SHAPE), dtype=np.uint8)
        got = writer.observe(np.arange(2), frames, episode_start=step == 0)
        for env in range(2):
            history[env].append(frames[env])
            numbers[env].append(int(got[env]))
    refs, ids = [], []
    for env in range(2):
        for t in range(STORED // 2):
            refs.append((env, numbers[env][t], numbers[env][t + 1]))
            ids.append(1000 + 10 * env + t)
            stack = [history[env][max(0, t - k)] for k in range(STACK - 1, -1, -1)]
            truth[ids[-1]] = np.stack(stack)
    scalars = {
        "action": np.zeros(STORED, np.int64),
        "reward": np.array(ids, np.float32),
        "discount": np.ones(STORED, np.float32),
    }
    client.insert_frames(
        lambda shard: writer.build(shard, np.array(refs), scalars, np.ones(STORED))
    )


def test_a_frame_shard_serves_only_stacks_that_were_inserted_after_forged_updates(
    context: zmq.Context,
) -> None:
    layout = FrameStackSpec(FRAME_SHAPE, "uint8", STACK, SCALARS)
    spec = layout.transition_spec
    config = ShardConfig(spec=spec, capacity=CAPACITY, frames=layout)
    truth: dict[int, np.ndarray] = {}
    with served(config, context, lambda client: _frame_inserts(client, truth)) as requests:
        before, after = send_forged_updates(requests)
        assert after["updates_applied"] == before["updates_applied"] + len(FORGED_UPDATES)
        assert after["updates_dropped"]["never_written"] == 68
        assert after["total_priority"] == pytest.approx(STORED)
        reply = requests.sample(64, 0.4, spec)
        assert ((reply.indices >= 0) & (reply.indices < STORED)).all()
        for reward, obs in zip(reply.fields["reward"], reply.fields["obs"], strict=True):
            np.testing.assert_array_equal(obs, truth[int(reward)])
