"""Free TCP ports for the roles a launcher starts on one machine (``apex train``, the
fleet benchmark): chosen before any role binds, so every role can start at once."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def _ephemeral_ports() -> range:
    """The kernel's range for outgoing connections' local ports (Linux; a common default
    elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def free_port(host: str, rng: random.Random | None = None) -> int:
    """A port that is free on ``host`` now, chosen below the ephemeral range when it can
    be: there, the many connections the roles open cannot take it as their local port
    before its role binds it (a port the kernel picks by binding 0 is an ephemeral one, and
    one of them was taken that way in a test run). Another server could still take it; the
    role then fails to start and the supervisor says so."""
    rng = rng or random.Random()
    ephemeral = _ephemeral_ports()
    if ephemeral.start > 11000:
        for _ in range(50):
            port = rng.randrange(10000, min(ephemeral.start, 30000))
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports that are free on ``host`` now (see :func:`free_port`)."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host, rng)
        if port not in ports:
            ports.append(port)
    return ports
