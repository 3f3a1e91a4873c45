"""Per-run CURVE keys: what ``apex train`` and ``apex slurm submit`` make for a run that
binds beyond loopback and was given none (``replay.wire.keys``, ``replay.wire.security``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launch.config import RunConfig
from launch.run_files import KEYS_DIR
from replay.wire import keys as key_files
from replay.wire.security import is_loopback


def needs_keys(config: RunConfig, on_cluster: bool) -> bool:
    """True when the run's roles bind beyond loopback and it has neither keys nor leave
    to run insecure."""
    exposed = on_cluster or not is_loopback(config.host)
    return exposed and config.security.keys is None and not config.security.insecure


def with_run_keys(config: RunConfig, run_dir: Path, on_cluster: bool = False) -> RunConfig:
    """``config``, with a new keypair in ``RUN_DIR/keys`` (secrets 0600) if it
    :func:`needs_keys`; every role reads them from the path saved in the run's config.

    Raises:
        KeysError: ``RUN_DIR/keys`` already holds keys (a run directory is not reused).
    """
    if not needs_keys(config, on_cluster):
        return config
    directory = (run_dir / KEYS_DIR).absolute()
    key_files.generate(directory)
    return replace(config, security=replace(config.security, keys=str(directory)))
