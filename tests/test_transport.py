"""Heartbeats over real TCP between processes: a connecting socket drops the connection to
a peer that froze (and ZeroMQ connects anew), and keeps a quiet live one; a reader that
stopped reading outlives a peer that left."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from replay.wire.transport import HEARTBEAT_IVL_MS, HEARTBEAT_TIMEOUT_MS, bind, make_socket

# A binding peer: prints its endpoint, then serves nothing until its stdin closes.
PEER = """
import sys, zmq
from replay.wire.transport import bind, make_socket
context = zmq.Context()
socket = make_socket(context, zmq.ROUTER, 16)
print(bind(socket, "127.0.0.1", 0), flush=True)
sys.stdin.read()
"""

# A reader that stops reading: binds a PULL, prints its endpoint, reads nothing until a
# line comes on stdin, then drains and prints how many messages it got.
STALLED_READER = """
import sys, zmq
from replay.wire.transport import bind, make_socket
context = zmq.Context()
socket = make_socket(context, zmq.PULL, 1, kernel_buffer_bytes=4096)
print(bind(socket, "127.0.0.1", 0), flush=True)
sys.stdin.readline()
taken = 0
while socket.poll(500):
    socket.recv()
    taken += 1
print(taken, flush=True)
"""
# A sender: pushes until the reader's queues are full, says so, and waits to be killed.
FILLING_SENDER = """
import sys, time, zmq
from replay.wire.transport import make_socket
context = zmq.Context()
socket = make_socket(context, zmq.PUSH, 1, kernel_buffer_bytes=4096)
socket.connect(sys.argv[1])
deadline = time.monotonic() + 30
# Full once no send can be queued for 0.5 s: the reader's queue and both kernel buffers.
while time.monotonic() < deadline and socket.poll(500, zmq.POLLOUT):
    try:
        socket.send(bytes(1000), zmq.NOBLOCK)
    except zmq.Again:
        pass
print("full", flush=True)
sys.stdin.read()
"""


def _next_event(monitor: zmq.Socket, wanted: int, deadline: float) -> dict | None:
    while monitor.poll(max(1, int((deadline - time.monotonic()) * 1000))):
        event = recv_monitor_message(monitor)
        if event["event"] == wanted:
            return event
    return None


@pytest.mark.slow
def test_a_frozen_peer_is_dropped_and_a_quiet_live_one_is_kept(context: zmq.Context) -> None:
    peers, sockets, monitors = [], [], []
    try:
        for _ in range(2):
            peer = subprocess.Popen(
                [sys.executable, "-c", PEER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            peers.append(peer)
            socket = make_socket(context, zmq.DEALER, 16)
            monitors.append(socket.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED))
            sockets.append(socket)
            socket.connect(peer.stdout.readline().strip())
            connected = _next_event(monitors[-1], zmq.EVENT_CONNECTED, time.monotonic() + 30)
            assert connected is not None, "no connection to a peer"
        frozen_at = time.monotonic()
        peers[0].send_signal(signal.SIGSTOP)  # it stops answering; its TCP socket stays open
        timeout_s = HEARTBEAT_TIMEOUT_MS / 1000
        dropped = _next_event(monitors[0], zmq.EVENT_DISCONNECTED, frozen_at + 3 * timeout_s)
        assert dropped is not None, "the connection to the frozen peer was never dropped"
        assert time.monotonic() - frozen_at >= timeout_s * 0.8
        # Nothing was sent to the live peer either: the pings alone keep its connection.
        assert _next_event(monitors[1], zmq.EVENT_DISCONNECTED, time.monotonic() + 1) is None
    finally:
        for peer in peers:
            peer.send_signal(signal.SIGCONT)
            peer.kill()
            peer.wait(10)
            peer.stdin.close()
            peer.stdout.close()
        for socket in [*monitors, *sockets]:
            socket.close(linger=0)


def test_only_request_sockets_ping_and_every_socket_keeps_tcp_alive(context: zmq.Context) -> None:
    sockets = [make_socket(context, kind, 4) for kind in (zmq.DEALER, zmq.PUSH, zmq.SUB, zmq.PULL)]
    try:
        ivl = [socket.getsockopt(zmq.HEARTBEAT_IVL) for socket in sockets]
        assert ivl == [HEARTBEAT_IVL_MS, 0, 0, 0]
        bind(sockets[3], "127.0.0.1", 0)
        assert all(socket.getsockopt(zmq.TCP_KEEPALIVE) == 1 for socket in sockets)
        router = make_socket(context, zmq.ROUTER, 4)
        sockets.append(router)
        bind(router, "127.0.0.1", 0)
        assert router.getsockopt(zmq.HEARTBEAT_IVL) == 0  # a bound socket never pings
    finally:
        for socket in sockets:
            socket.close(linger=0)


@pytest.mark.slow
def test_a_reader_that_stopped_reading_outlives_a_peer_that_left() -> None:
    """libzmq 4.3.5 aborted such a reader at its next ping (issue 4364): a shard whose
    rate limiter held inserts died when an actor left."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    reader = subprocess.Popen(
        [sys.executable, "-c", STALLED_READER], stderr=subprocess.PIPE, **pipes
    )
    sender = None
    try:
        endpoint = reader.stdout.readline().strip()
        sender = subprocess.Popen([sys.executable, "-c", FILLING_SENDER, endpoint], **pipes)
        assert sender.stdout.readline().strip() == "full"
        sender.kill()
        sender.wait(10)
        # Past a connecting socket's ping interval, the reader still not reading, lives on.
        with pytest.raises(subprocess.TimeoutExpired):
            reader.wait(timeout=1.5 * HEARTBEAT_IVL_MS / 1000)
        reader.stdin.write("read\n")
        reader.stdin.flush()
        output, errors = reader.communicate(timeout=30)
        assert reader.returncode == 0, errors
        assert int(output) >= 1
    finally:
        for process in (reader, sender):
            if process is not None:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
                for stream in (process.stdin, process.stdout, process.stderr):
                    if stream is not None:
                        stream.close()
