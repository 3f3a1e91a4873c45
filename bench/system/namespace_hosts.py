"""Three network namespaces as separate hosts on one machine (``slurm/cluster/netns.sh``):
roles on "hosts" joined by a bridge, each connection through veth pairs and the kernel's
bridge, as across a cluster's network. Root only."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

from bench.workers import REPO_ROOT

HOSTS = {"learner": "10.200.0.11", "shard": "10.200.0.12", "actor": "10.200.0.13"}
NETNS_SCRIPT = REPO_ROOT / "slurm" / "cluster" / "netns.sh"


@contextlib.contextmanager
def namespace_hosts() -> Iterator[None]:
    """The three namespace hosts, made (and removed after) unless they are up already."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    if all(host in listed.stdout for host in HOSTS):
        yield
        return
    subprocess.run(["bash", str(NETNS_SCRIPT), "up"], check=True, timeout=120)
    try:
        yield
    finally:
        subprocess.run(["bash", str(NETNS_SCRIPT), "down"], check=False, timeout=60)
