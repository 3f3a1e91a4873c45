"""``apex keys``: a run's CURVE keys (``replay.wire.keys``)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("keys")
def keys() -> None:
    """CURVE keys: only processes holding them can talk to a run's sockets."""


@keys.command("generate")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace keys already in DIRECTORY.")
def generate(directory: Path, force: bool) -> None:
    """Write a server and a client keypair into DIRECTORY (secret files mode 0600).

    Give the directory to every role (--keys DIR, or [security] keys in the run config).
    A host that only runs actors needs server.key and the client pair, not
    server.key_secret."""
    from replay.wire.keys import KeysError
    from replay.wire.keys import generate as write_keys

    try:
        written = write_keys(directory, overwrite=force)
    except KeysError as exc:
        raise click.UsageError(str(exc)) from exc
    except OSError as exc:
        raise click.UsageError(f"cannot write keys into {directory}: {exc}") from exc
    for path in written:
        click.echo(f"wrote {path}")


@keys.command("check")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def check(directory: Path) -> None:
    """Read DIRECTORY's keys as a role would, and say what they admit."""
    from replay.wire.keys import KeysError, fingerprint, load

    try:
        loaded = load(directory)
    except KeysError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(
        f"server key {fingerprint(loaded.server.public)}…, client key "
        f"{fingerprint(loaded.client.public)}…, {len(loaded.admitted)} client key(s) "
        "admitted"
    )
