"""A run's CURVE keys on disk: a server keypair, a client keypair, and who is admitted.

Directory layout (what ``apex keys generate DIR`` writes)::

    DIR/server.key          the servers' public key (shards, the learner's PUB and PULL)
    DIR/server.key_secret   its secret key (mode 0600)
    DIR/client.key          the clients' public key (actors, the learner's requests)
    DIR/client.key_secret   its secret key (mode 0600)
    DIR/admitted/*.key      optional: more client public keys the servers admit

The files are ZeroMQ's certificate format (ZPL text with z85 keys, as czmq's ``zcert``
and pyzmq's ``zmq.auth`` write them), so ZeroMQ's own tools read them. The parser here is
strict: a key is exactly 40 z85 characters, a secret key must match its public key, and a
secret file readable by group or others is refused (as ssh refuses such a private key).

A process that only connects (an actor) needs ``server.key`` and the client pair; one
that binds needs the server pair too. Copying only what a host needs is the point of
keeping them in separate files.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.utils import z85

from replay.errors import ConfigError

SERVER = "server"
CLIENT = "client"
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
ADMITTED_DIR = "admitted"
Z85_KEY_CHARS = 40
_KEY_LINE = re.compile(r'^\s*(public|secret)-key\s*=\s*"([^"]*)"\s*$')
_Z85_ALPHABET = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)


class KeysError(ConfigError):
    """Key files that are missing, malformed, mismatched or readable by others."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems, "CURVE keys")


@dataclass(frozen=True)
class KeyPair:
    """One CURVE keypair as z85 bytes; ``secret`` is None where this host has no secret."""

    public: bytes
    secret: bytes | None


@dataclass(frozen=True)
class RunKeys:
    """A run's keys as one process reads them.

    Attributes:
        directory: where they were read from.
        server: the servers' pair (secret None on hosts that only connect).
        client: the clients' pair.
        admitted: the client public keys servers let in (z85).
    """

    directory: Path
    server: KeyPair
    client: KeyPair
    admitted: frozenset[bytes]


def _certificate(public: bytes, secret: bytes | None) -> str:
    kind = "Secret" if secret is not None else "Public"
    lines = [
        f"#   ****  Generated {time.strftime('%Y-%m-%d %H:%M:%S')} by apex keys generate  ****",
        f"#   ZeroMQ CURVE {kind} Certificate",
        "#   Exchange the public one freely; never share the secret one.",
        "",
        "metadata",
        "curve",
        f'    public-key = "{public.decode("ascii")}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, mode: int) -> None:
    # Created with its mode, never chmod-ed after: a secret is not readable for a moment.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(text)
    os.chmod(path, mode)  # O_CREAT's mode passes the umask; an existing file keeps its own


def key_paths(directory: Path) -> list[Path]:
    """The four files :func:`generate` writes."""
    return [
        directory / f"{name}{suffix}"
        for name in (SERVER, CLIENT)
        for suffix in (PUBLIC_SUFFIX, SECRET_SUFFIX)
    ]


def generate(directory: Path, overwrite: bool = False) -> list[Path]:
    """Writes a new server and client keypair into ``directory`` (created 0700 if absent).

    Returns:
        The files written.

    Raises:
        KeysError: key files are there already and ``overwrite`` is False.
    """
    directory = Path(directory)
    existing = [path for path in key_paths(directory) if path.exists()]
    if existing and not overwrite:
        raise KeysError(
            [f"{path} exists (pass --force to replace the run's keys)" for path in existing]
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    written = []
    for name in (SERVER, CLIENT):
        public, secret = zmq.curve_keypair()
        public_path = directory / f"{name}{PUBLIC_SUFFIX}"
        secret_path = directory / f"{name}{SECRET_SUFFIX}"
        _write(secret_path, _certificate(public, secret), 0o600)
        _write(public_path, _certificate(public, None), 0o644)
        written += [public_path, secret_path]
    return written


def _parse(path: Path, want_secret: bool, problems: list[str]) -> KeyPair | None:
    try:
        if want_secret:
            mode = path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                problems.append(
                    f"{path} is readable by others (mode {stat.filemode(mode)}): chmod 600 {path}"
                )
                return None
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        problems.append(f"{path} is missing (make keys with: apex keys generate {path.parent})")
        return None
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path} cannot be read: {exc}")
        return None
    found: dict[str, bytes] = {}
    for line in text.splitlines():
        match = _KEY_LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2).encode("ascii")
    for kind in ("public", "secret") if want_secret else ("public",):
        key = found.get(kind)
        if key is None:
            problems.append(f"{path} has no {kind}-key line")
            return None
        if len(key) != Z85_KEY_CHARS or not set(key.decode()) <= _Z85_ALPHABET:
            problems.append(f"{path}: the {kind} key is not {Z85_KEY_CHARS} z85 characters")
            return None
    pair = KeyPair(found["public"], found["secret"] if want_secret else None)
    if pair.secret is not None and zmq.curve_public(pair.secret) != pair.public:
        problems.append(f"{path}: its secret key does not belong to its public key")
        return None
    return pair


def load(directory: str | Path, need_server_secret: bool = True) -> RunKeys:
    """Reads a run's keys (see the module docstring for the layout).

    Args:
        need_server_secret: False on a host that only connects: ``server.key_secret`` may
            then be absent (it is still checked if there).

    Raises:
        KeysError: every problem found: a file missing or malformed, a secret not matching
            its public key, a secret file readable by others.
    """
    directory = Path(directory)
    problems: list[str] = []
    if not directory.is_dir():
        raise KeysError(
            [
                f"{directory} is not a directory of keys "
                f"(make one with: apex keys generate {directory})"
            ]
        )
    server_secret = directory / f"{SERVER}{SECRET_SUFFIX}"
    with_secret = need_server_secret or server_secret.exists()
    server = _parse(
        server_secret if with_secret else directory / f"{SERVER}{PUBLIC_SUFFIX}",
        with_secret,
        problems,
    )
    if server is not None and with_secret:
        public = _parse(directory / f"{SERVER}{PUBLIC_SUFFIX}", False, problems)
        if public is not None and public.public != server.public:
            problems.append(f"{directory}: server.key and server.key_secret are not one pair")
    client = _parse(directory / f"{CLIENT}{SECRET_SUFFIX}", True, problems)
    admitted = {client.public} if client is not None else set()
    for path in sorted((directory / ADMITTED_DIR).glob(f"*{PUBLIC_SUFFIX}")):
        extra = _parse(path, False, problems)
        if extra is not None:
            admitted.add(extra.public)
    if problems:
        raise KeysError(problems)
    assert server is not None and client is not None
    return RunKeys(directory, server, client, frozenset(admitted))


def fingerprint(z85_key: bytes) -> str:
    """A short name for a public key in logs (its first 8 z85 characters)."""
    return z85_key[:8].decode("ascii", "replace")


def raw_key(z85_key: bytes) -> bytes:
    """The 32 raw bytes of a z85 key (what a ZAP request carries)."""
    return z85.decode(z85_key)
