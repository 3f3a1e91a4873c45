"""Heartbeats over real TCP between processes: a connecting socket drops the connection to
a peer that froze (and ZeroMQ connects anew), and keeps a quiet live one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from replay.wire.transport import HEARTBEAT_TIMEOUT_MS, make_socket

# A binding peer: prints its endpoint, then serves nothing until its stdin closes.
PEER = """
import sys, zmq
from replay.wire.transport import bind, make_socket
context = zmq.Context()
socket = make_socket(context, zmq.ROUTER, 16)
print(bind(socket, "127.0.0.1", 0), flush=True)
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
            peer = subprocess.Popen([sys.executable, "-c", PEER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)  # fmt: skip
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
