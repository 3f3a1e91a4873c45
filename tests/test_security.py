"""Only the run's own processes get in: CURVE keys on disk, a keyed shard and a keyed
weights channel over real TCP, refusals counted by reason, the loopback rule, and
per-connection sender accounting."""

from __future__ import annotations

import contextlib
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zmq
import zmq.auth
from click.testing import CliRunner

from apex.algorithms.networks import DuelingMLP
from apex.algorithms.policy import NumpyDuelingMLP
from apex.weights import WeightPublisher, WeightSubscriber
from launch.cli import main
from replay.errors import ConfigError, ReplayTimeout
from replay.protocol.requests import RequestClient
from replay.server.config import ShardConfig
from replay.server.senders import MAX_SENDERS_PER_PEER
from replay.server.shard import ShardServer
from replay.wire.keys import KeysError, generate, load
from replay.wire.layout import Kind, Message, encode
from replay.wire.security import SecurityConfig, make_context
from replay.wire.transport import make_socket, send_frames
from tests.conftest import SMALL_SPEC, ShardProcess, make_batch, wait_for

# How long a refused client keeps trying before we conclude it got nothing.
REFUSED_WAIT_S = 1.5
REASONS = {"none": "no_key", "stranger": "wrong_key", "unadmitted": "not_admitted"}


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    """The run's keys, a stranger's whole set, and a client whose pair the run never
    admitted but who pinned the run's real server key."""
    root = tmp_path_factory.mktemp("keys")
    generate(root / "run")
    generate(root / "stranger")
    generate(root / "unadmitted")
    (root / "unadmitted" / "server.key_secret").unlink()
    shutil.copy(root / "run" / "server.key", root / "unadmitted" / "server.key")
    (root / "none").mkdir()
    return {name: root / name for name in ("run", "stranger", "unadmitted", "none")}


def client_context(keys: dict[str, Path], who: str) -> zmq.Context:
    """A connecting process's context: ``none`` has no keys at all."""
    if who == "none":
        return make_context()
    return make_context(SecurityConfig(str(keys[who])), need_server_secret=False)


@pytest.fixture(scope="module")
def keyed_shard(keys) -> ShardProcess:
    process = ShardProcess("--capacity", "64", "--seed", "1", "--keys", str(keys["run"]))
    yield process
    assert process.stop() == 0


def insert_frames(sender: int, count: int, first_id: int = 0) -> list:
    batch = make_batch(SMALL_SPEC, count, first_id)
    return encode(Message(Kind.INSERT, sender, 0, 0, count, 0.0, (*batch.values(), np.ones(count))))


# -- key files --------------------------------------------------------------------------


def test_generated_keys_load_and_their_secrets_are_private(tmp_path: Path) -> None:
    written = generate(tmp_path / "k")
    assert sorted(p.name for p in written) == sorted(
        ["server.key", "server.key_secret", "client.key", "client.key_secret"]
    )
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o600 if path.name.endswith("_secret") else 0o644), path
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o700
    loaded = load(tmp_path / "k")
    assert loaded.admitted == {loaded.client.public}
    assert zmq.curve_public(loaded.server.secret) == loaded.server.public
    # ZeroMQ's own certificate reader takes them (czmq/pyzmq format).
    assert zmq.auth.load_certificate(tmp_path / "k" / "server.key_secret") == (
        loaded.server.public,
        loaded.server.secret,
    )


def test_keys_are_never_overwritten_unless_asked(tmp_path: Path) -> None:
    generate(tmp_path)
    before = (tmp_path / "server.key").read_text()
    with pytest.raises(KeysError, match="--force"):
        generate(tmp_path)
    assert (tmp_path / "server.key").read_text() == before
    runner = CliRunner()
    refused = runner.invoke(main, ["keys", "generate", str(tmp_path)])
    assert refused.exit_code == 2 and "exists" in refused.output
    forced = runner.invoke(main, ["keys", "generate", str(tmp_path), "--force"])
    assert forced.exit_code == 0, forced.output
    assert (tmp_path / "server.key").read_text() != before


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "client.key_secret").unlink(), "client.key_secret is missing"),
        (lambda d: (d / "client.key_secret").chmod(0o644), "readable by others"),
        (lambda d: (d / "server.key").write_text('public-key = "short"\n'), "40 z85"),
        (lambda d: (d / "server.key").write_text("garbage\n"), "no public-key line"),
        (lambda d: (d / "client.key_secret").write_bytes(b"\xff\xfe"), "cannot be read"),
        (lambda d: shutil.copy(d / "client.key", d / "server.key"), "not one pair"),
    ],
)
def test_damaged_keys_are_refused_with_what_is_wrong(tmp_path: Path, damage, message) -> None:
    generate(tmp_path)
    damage(tmp_path)
    with pytest.raises(KeysError, match=message):
        load(tmp_path)
    result = CliRunner().invoke(main, ["keys", "check", str(tmp_path)])
    assert result.exit_code == 2 and message.split()[0] in result.output


def test_a_secret_that_does_not_match_its_public_key_is_refused(tmp_path: Path) -> None:
    generate(tmp_path / "a")
    generate(tmp_path / "b")
    text = (tmp_path / "a" / "client.key_secret").read_text()
    other = load(tmp_path / "b").client.secret.decode()
    mine = load(tmp_path / "a").client.secret.decode()
    (tmp_path / "a" / "client.key_secret").write_text(text.replace(mine, other))
    with pytest.raises(KeysError, match="does not belong"):
        load(tmp_path / "a")


# -- a keyed shard ----------------------------------------------------------------------


def test_the_run_s_client_inserts_samples_updates_and_reads_info(keys, keyed_shard) -> None:
    context = client_context(keys, "run")
    try:
        requests = RequestClient(context, keyed_shard.endpoints.request, sender=1, timeout_s=5)
        assert requests.spec() == SMALL_SPEC
        pusher = make_socket(context, zmq.PUSH, hwm=8)
        pusher.connect(keyed_shard.endpoints.insert)
        before = requests.info()["transitions_added"]
        send_frames(pusher, insert_frames(sender=5, count=10))
        wait_for(lambda: requests.info()["transitions_added"] == before + 10, what="insert")
        sample = requests.sample(4, 0.4, SMALL_SPEC)
        requests.update(sample.indices, sample.generations, np.full(4, 7.0))
        wait_for(lambda: requests.info()["updates_applied"] >= 1, what="update applied")
        pusher.close()
        requests.close()
    finally:
        context.destroy(linger=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("who", "reason"),
    [("none", "no_key"), ("stranger", "wrong_key"), ("unadmitted", "not_admitted")],
)
def test_a_peer_without_the_run_s_key_gets_nothing_in_and_nothing_out(
    keys, keyed_shard, who: str, reason: str
) -> None:
    run = client_context(keys, "run")
    outsider = client_context(keys, who)
    try:
        watcher = RequestClient(run, keyed_shard.endpoints.request, sender=2, timeout_s=5)
        start = watcher.info()
        refused = RequestClient(
            outsider, keyed_shard.endpoints.request, sender=3, timeout_s=REFUSED_WAIT_S
        )
        # Refused at the handshake, so no request of any kind is answered: a sample
        # stands for them all (each refusal waits out REFUSED_WAIT_S).
        with pytest.raises(ReplayTimeout):
            refused.sample(4, 0.4, SMALL_SPEC)
        # A priority rewrite and an insert: neither may land.
        size = start["size"]
        # Queued on a connection that never completes, or refused at once for want of one.
        with contextlib.suppress(ReplayTimeout):
            refused.update(
                np.arange(min(size, 4)),
                np.zeros(min(size, 4), np.int64),
                np.full(min(size, 4), 1e6),
            )
        pusher = make_socket(outsider, zmq.PUSH, hwm=8)
        pusher.connect(keyed_shard.endpoints.insert)
        send_frames(pusher, insert_frames(sender=66, count=10), zmq.NOBLOCK)
        counters = wait_for(
            lambda: (c := watcher.info())["refused"][reason] >= start["refused"][reason] + 2 and c,
            what=f"{reason} refusals counted on both sockets",
        )
        after = watcher.info()
        assert after["transitions_added"] == start["transitions_added"]
        assert after["total_priority"] == pytest.approx(start["total_priority"])
        assert after["updates_applied"] == start["updates_applied"]
        assert "66" not in after["senders"] and "3" not in after["senders"]
        assert counters["refused"][reason] > start["refused"][reason]
        pusher.close()
        refused.close()
        watcher.close()
    finally:
        run.destroy(linger=0)
        outsider.destroy(linger=0)


# -- the weights channel ----------------------------------------------------------------


def _publish_until(publisher: WeightPublisher, module, condition, what: str, timeout_s: float):
    """Publishes version 1, 2, ... every 50 ms until ``condition()`` or the timeout."""
    version = 0

    def published_and_checked():
        nonlocal version
        version += 1
        publisher.publish(module, version)
        return condition()

    return wait_for(published_and_checked, timeout_s=timeout_s, interval_s=0.05, what=what)


@pytest.mark.slow
@pytest.mark.parametrize("who", ["none", "stranger", "unadmitted"])
def test_only_the_run_s_actors_receive_weights(keys, who: str) -> None:
    learner = make_context(SecurityConfig(str(keys["run"])))
    actor, outsider = client_context(keys, "run"), client_context(keys, who)
    network = DuelingMLP(4, 2, (8,))
    try:
        publisher = WeightPublisher(learner, "127.0.0.1", 0)
        ours = WeightSubscriber(actor, publisher.endpoint)
        theirs = WeightSubscriber(outsider, publisher.endpoint)
        policy, their_policy = NumpyDuelingMLP(4, 2, (8,), 0), NumpyDuelingMLP(4, 2, (8,), 0)
        _publish_until(publisher, network, lambda: ours.poll(policy), "the run's actor", 10)
        with pytest.raises(AssertionError, match="timed out"):
            _publish_until(
                publisher,
                network,
                lambda: theirs.poll(their_policy),
                "an outsider's weights",
                REFUSED_WAIT_S,
            )
        assert theirs.version == -1
        assert wait_for(lambda: learner.refusals()[REASONS[who]] >= 1, what="refusal counted")
        for socket in (publisher, ours, theirs):
            socket.close()
    finally:
        for context in (learner, actor, outsider):
            context.destroy(linger=0)


def test_an_actor_never_loads_weights_from_a_publisher_that_is_not_the_run_s(keys) -> None:
    """A stranger binds a PUB where the actor looks (the wrong address, a port taken
    over): without the run's server secret it cannot finish the actor's handshake."""
    impostor = make_context(SecurityConfig(str(keys["stranger"])))
    actor = client_context(keys, "run")
    try:
        publisher = WeightPublisher(impostor, "127.0.0.1", 0)
        subscriber = WeightSubscriber(actor, publisher.endpoint)
        policy = NumpyDuelingMLP(4, 2, (8,), 0)
        with pytest.raises(AssertionError, match="timed out"):
            _publish_until(
                publisher,
                DuelingMLP(4, 2, (8,)),
                lambda: subscriber.poll(policy),
                "weights from an impostor",
                REFUSED_WAIT_S,
            )
        assert subscriber.version == -1
        publisher.close()
        subscriber.close()
    finally:
        impostor.destroy(linger=0)
        actor.destroy(linger=0)


# -- the loopback rule ------------------------------------------------------------------


def test_binding_beyond_loopback_needs_keys_or_an_explicit_insecure(keys, caplog) -> None:
    exposed = ShardConfig(spec=SMALL_SPEC, capacity=16, host="0.0.0.0")
    with pytest.raises(ConfigError, match="--keys DIR"):
        ShardServer(exposed)
    keyed = ShardServer(replace(exposed, security=SecurityConfig(str(keys["run"]))))
    keyed.close()
    with caplog.at_level("WARNING"):
        insecure = ShardServer(replace(exposed, security=SecurityConfig(insecure=True)))
    insecure.close()
    assert "INSECURE" in caplog.text
    loopback = ShardServer(ShardConfig(spec=SMALL_SPEC, capacity=16))
    loopback.close()
    result = CliRunner().invoke(main, ["replay", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--insecure" in result.output


# -- who a sender is ----------------------------------------------------------------------


def test_one_connection_inventing_ids_cannot_push_real_actors_into_the_pool() -> None:
    shard = ShardProcess("--capacity", "4096")
    context = zmq.Context()
    try:
        forger = make_socket(context, zmq.PUSH, hwm=1000)
        forger.connect(shard.endpoints.insert)
        for sender in range(5000, 5000 + 200):  # valid data under 200 invented ids
            send_frames(forger, insert_frames(sender, count=2, first_id=sender))
        requests = RequestClient(context, shard.endpoints.request, sender=1, timeout_s=5)
        wait_for(lambda: requests.info()["transitions_added"] == 400, what="forged inserts")
        actor = make_socket(context, zmq.PUSH, hwm=8)
        actor.connect(shard.endpoints.insert)
        send_frames(actor, insert_frames(sender=7, count=3))
        counters = wait_for(
            lambda: (c := requests.info())["transitions_added"] == 403 and c, what="real insert"
        )
        senders = counters["senders"]
        assert senders["7"]["transitions"] == 3  # the real actor keeps its own account
        forged = [s for s in senders if s.isdigit() and int(s) >= 5000]
        assert len(forged) == MAX_SENDERS_PER_PEER
        assert senders["-1"]["transitions"] == 2 * (200 - MAX_SENDERS_PER_PEER)
        forger.close()
        actor.close()
        requests.close()
    finally:
        context.destroy(linger=0)
        assert shard.stop() == 0


# -- whole runs -------------------------------------------------------------------------


def test_insecure_is_recorded_and_a_loopback_run_needs_no_keys(tmp_path: Path) -> None:
    from launch.config import resolve
    from launch.run_keys import needs_keys, with_run_keys
    from launch.run_summary import security_mode

    exposed = resolve({}, {"host": "0.0.0.0"})
    assert needs_keys(exposed, on_cluster=False)
    insecure = resolve({}, {"host": "0.0.0.0", "security": {"insecure": True}})
    assert not needs_keys(insecure, on_cluster=True)
    assert security_mode(insecure.to_dict()["security"]) == "insecure"
    loopback = resolve({}, {})
    assert with_run_keys(loopback, tmp_path) is loopback and not (tmp_path / "keys").exists()
    assert with_run_keys(loopback, tmp_path, on_cluster=True).security.keys == str(
        tmp_path / "keys"
    )
    with pytest.raises(KeysError, match="exists"):  # a run directory is not reused
        with_run_keys(loopback, tmp_path, on_cluster=True)
    bad = CliRunner().invoke(main, ["train", "--keys", str(tmp_path / "missing")])
    assert bad.exit_code == 2 and "does not exist" in bad.output
