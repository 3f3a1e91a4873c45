"""The learner's two channels to the actors: versioned weights out (``apex.weights``),
episode results in (here), and the message kinds of both.

* Episodes: actors PUSH EPISODES messages (returns and lengths of finished episodes) to
  the learner's PULL socket, which feeds the learner's metrics. The header's scalar
  carries the actor's running count of transitions handed to the replay client, and an
  actor sends one (maybe empty) message at least every ``HEARTBEAT_S``: the learner knows
  which actors are alive and can compare what each sent with what the shards received.
  A third array holds the actor's counts (:data:`ACTOR_COUNTS`): transitions the shards
  have not confirmed yet, batches resent, shard restarts seen, batches rerouted from
  shards given up and transitions abandoned with them, env steps taken, its env copies'
  faults (``apex.envs.guard``), the steps they cost and the items dropped with them, how
  long its envs have been in the step under way where that is over ``STUCK_AFTER_S``
  (sent by its watchdog while the step hangs), and whether this is its last word (sent
  after it waited for its shards' confirmations). A fourth array, empty while there are
  none, holds its faults by kind as UTF-8 JSON ``{kind: [count, latest line]}``.
* Evaluations: the run's evaluator (``apex.learning.evaluator``) PUSHes EVALUATION messages to the
  same PULL socket; the collector hands them, undecoded past the header, to the handler
  the learner gave it. A WEIGHTS header's scalar carries the env steps the actors had
  reported when the weights were published: the evaluator's cadence.

A message that does not fit (malformed, other parameter names or shapes) is counted and
skipped, never loaded.

Both kinds are apex's, numbered in the range ``replay.wire.layout`` reserves for applications
(:class:`ApexKind`); they travel in replay's frame format but never reach a shard.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import zmq

from replay.errors import ProtocolError
from replay.wire.layout import APPLICATION_KINDS, Message, decode, encode
from replay.wire.transport import bind, make_socket, send_frames

logger = logging.getLogger(__name__)

EPISODES_HWM = 1000
HEARTBEAT_S = 1.0
MAX_TRACKED_ACTORS = 65_536
MAX_LIVES = 64
# An EPISODES message's third array, in this order (the last is 1 in an actor's last word).
ACTOR_COUNTS = (
    "unconfirmed",
    "resent",
    "shard_restarts_seen",
    "rerouted",
    "abandoned",
    "env_steps",
    "env_faults",
    "env_steps_dropped",
    "items_dropped",
    "stuck_s",
    "final",
)
# An env step going on this long makes a heartbeat say the actor is stuck in it.
STUCK_AFTER_S = 2 * HEARTBEAT_S
# The longest fault summary an actor may send (JSON bytes).
MAX_FAULT_BYTES = 8192


class ApexKind(enum.IntEnum):
    """The messages between the learner and the actors."""

    WEIGHTS = APPLICATION_KINDS.start
    EPISODES = APPLICATION_KINDS.start + 1
    EVALUATION = APPLICATION_KINDS.start + 2
    RUN_ENDED = APPLICATION_KINDS.start + 3  # on the weights' PUB: the actors stop


def read_episodes(message: Message) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """An EPISODES message's returns (f64), lengths (i64), the actor's counts
    (:data:`ACTOR_COUNTS`, i64, none negative) and its faults by kind.

    Raises:
        ProtocolError: another kind, or arrays that do not fit.
    """
    if message.kind != ApexKind.EPISODES or len(message.arrays) != 4:
        raise ProtocolError(f"expected EPISODES of 4 arrays, got {message.kind.name}")
    returns, lengths, counts, faults = message.arrays
    if (
        returns.ndim != 1
        or returns.shape != lengths.shape
        or returns.dtype != np.float64
        or (lengths.dtype != np.int64)
    ):
        raise ProtocolError(
            f"returns {returns.dtype}{returns.shape} and lengths "
            f"{lengths.dtype}{lengths.shape} disagree"
        )
    if counts.shape != (len(ACTOR_COUNTS),) or counts.dtype != np.int64 or (counts < 0).any():
        raise ProtocolError("malformed delivery counts")
    if not 0.0 <= message.scalar < 2.0**53:  # also refuses NaN
        raise ProtocolError(f"transitions sent {message.scalar} is not a count")
    return returns, lengths, counts, _read_faults(faults)


def _read_faults(array: np.ndarray) -> dict[str, list]:
    """``{kind: [count, latest line]}`` from an EPISODES message's fourth array."""
    if array.dtype != np.uint8 or array.ndim != 1 or array.size > MAX_FAULT_BYTES:
        raise ProtocolError("malformed fault summary")
    if not array.size:
        return {}
    try:
        faults = json.loads(array.tobytes().decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"fault summary is not JSON: {exc}") from None
    if not isinstance(faults, dict) or not all(
        isinstance(entry, list)
        and len(entry) == 2
        and type(entry[0]) is int
        and entry[0] >= 0
        and isinstance(entry[1], str)
        for entry in faults.values()
    ):
        raise ProtocolError("fault summary is not {kind: [count, line]}")
    return faults


class EpisodeReporter:
    """An actor's side: sends finished episodes' returns and lengths."""

    def __init__(self, context: zmq.Context, endpoint: str, sender: int) -> None:
        self._socket = make_socket(context, zmq.PUSH, EPISODES_HWM)
        self._socket.connect(endpoint)
        self._sender = sender
        self._sequence = 0
        # A restarted actor reuses its index: the learner tells its lives apart by this.
        self.incarnation = secrets.randbits(32) or 1
        self.last_report = float("-inf")

    def report(
        self,
        returns: list[float],
        lengths: list[int],
        policy_version: int,
        transitions_sent: int,
        delivery: dict[str, int] | None = None,
        final: bool = False,
        env_steps: int = 0,
        faults: dict | None = None,
    ) -> None:
        """Sends finished episodes (none: a heartbeat), the actor's delivery counts
        (``replay.inserts.client.InsertClient.delivery``), env steps and fault counts
        (``faults``: :data:`ACTOR_COUNTS`' from ``env_faults`` to ``stuck_s``, and
        ``kinds``, ``{kind: [count, latest line]}``); ``final``: its last word."""
        faults = faults or {}
        known = {**(delivery or {}), **faults, "env_steps": env_steps}
        counts = [int(known.get(name, 0)) for name in ACTOR_COUNTS[:-1]] + [int(final)]
        kinds = json.dumps(faults["kinds"]).encode() if faults.get("kinds") else b""
        if len(kinds) > MAX_FAULT_BYTES:  # lines of a user's text: the counts matter most
            kinds = json.dumps({k: [n, ""] for k, (n, _) in faults["kinds"].items()}).encode()
        arrays = (
            np.asarray(returns, dtype=np.float64),
            np.asarray(lengths, dtype=np.int64),
            np.asarray(counts, dtype=np.int64),
            np.frombuffer(kinds, dtype=np.uint8),
        )
        frames = encode(
            Message(
                ApexKind.EPISODES,
                self._sender,
                self._sequence,
                policy_version,
                len(returns),
                float(transitions_sent),
                arrays,
                incarnation=self.incarnation,
            )
        )
        self._sequence += 1
        self.last_report = time.monotonic()
        with contextlib.suppress(zmq.Again):  # metrics are best-effort; data never waits on them
            send_frames(self._socket, frames, zmq.NOBLOCK)

    def heartbeat_due(self) -> bool:
        return time.monotonic() - self.last_report >= HEARTBEAT_S

    def close(self, linger_s: float = 0.5) -> None:
        self._socket.close(linger=int(linger_s * 1000))


@dataclass
class ActorStatus:
    """What the learner has heard from one actor (times from ``time.monotonic``); the
    delivery counts are as of its last report."""

    last_heard: float
    transitions_sent: int = 0
    """Over every life of the actor (a restarted actor keeps its index)."""
    longest_silence_s: float = 0.0
    unconfirmed: int = 0
    resent: int = 0
    shard_restarts_seen: int = 0
    rerouted: int = 0
    abandoned: int = 0
    final: bool = False
    env_steps: int = 0
    """Over every life, as ``transitions_sent``."""
    lives: dict[int, int] = field(default_factory=dict)
    """Transitions sent per life (incarnation), at most ``MAX_LIVES`` kept apart."""
    steps_by_life: dict[int, int] = field(default_factory=dict)
    faults_by_life: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """Env faults, env steps dropped and items dropped, per life."""
    kinds_by_life: dict[int, dict[str, list]] = field(default_factory=dict)
    stuck_s: int = 0
    """How long its envs had been in one step, by its last report (0: not stuck)."""

    @property
    def faults(self) -> tuple[int, int, int]:
        """Env faults, env steps dropped and items dropped, over every life."""
        lives = self.faults_by_life.values()
        return tuple(sum(life[i] for life in lives) for i in range(3))


def fault_totals(actors: Iterable[ActorStatus]) -> dict:
    """What the actors' env faults came to over all their lives: ``env_faults``,
    ``env_steps_dropped``, ``items_dropped`` and ``env_fault_kinds`` (``{kind: [count,
    latest line]}``)."""
    totals = [0, 0, 0]
    kinds: dict[str, list] = {}
    for status in actors:
        totals = [a + b for a, b in zip(totals, status.faults, strict=True)]
        for life in status.kinds_by_life.values():
            for kind, (count, line) in life.items():
                entry = kinds.setdefault(kind, [0, ""])
                entry[0] += count
                entry[1] = line or entry[1]
    return {
        "env_faults": totals[0],
        "env_steps_dropped": totals[1],
        "items_dropped": totals[2],
        "env_fault_kinds": kinds,
    }


class EpisodeCollector:
    """The learner's side: receives episode results and heartbeats from every actor."""

    def __init__(
        self,
        context: zmq.Context,
        host: str = "127.0.0.1",
        port: int = 0,
        on_evaluation: Callable[[Message], None] | None = None,
    ) -> None:
        """``on_evaluation`` takes each EVALUATION message and raises ``ProtocolError``
        for one it refuses (counted with the rest); without it they are refused."""
        self._socket = make_socket(context, zmq.PULL, EPISODES_HWM)
        self._on_evaluation = on_evaluation
        self.endpoint = bind(self._socket, host, port)
        self.received = 0
        """Messages taken off the socket: each is taken (``reports``) or ``rejected``."""
        self.reports = 0
        self.rejected = 0
        self.actors: dict[int, ActorStatus] = {}

    def _heard(
        self,
        sender: int,
        incarnation: int,
        transitions_sent: float,
        counts: np.ndarray,
        kinds: dict,
    ) -> None:
        now = time.monotonic()
        status = self.actors.get(sender)
        if status is None:
            if len(self.actors) >= MAX_TRACKED_ACTORS:
                return
            status = self.actors[sender] = ActorStatus(now)
        status.longest_silence_s = max(status.longest_silence_s, now - status.last_heard)
        status.last_heard = now
        if incarnation not in status.lives and len(status.lives) >= MAX_LIVES:
            incarnation = 0  # forged or endless restarts: pooled, still counted
        sent = max(status.lives.get(incarnation, 0), int(transitions_sent))
        status.lives[incarnation] = sent
        status.transitions_sent = sum(status.lives.values())
        (
            status.unconfirmed,
            status.resent,
            status.shard_restarts_seen,
            status.rerouted,
            status.abandoned,
            env_steps,
            faults,
            steps_dropped,
            items_dropped,
            status.stuck_s,
            final,
        ) = counts.tolist()
        if faults or incarnation in status.faults_by_life:
            known = status.faults_by_life.get(incarnation, (0, 0, 0))
            heard = (faults, steps_dropped, items_dropped)
            status.faults_by_life[incarnation] = tuple(map(max, known, heard))
            status.kinds_by_life[incarnation] = kinds or status.kinds_by_life.get(incarnation, {})
        status.steps_by_life[incarnation] = max(status.steps_by_life.get(incarnation, 0), env_steps)
        status.env_steps = sum(status.steps_by_life.values())
        status.final = bool(final)

    def brief(self, silent_after_s: float = 10.0) -> dict[str, int]:
        """How many actors were heard, how many have been silent ``silent_after_s`` or
        more, and what they sent: for progress records and apex top."""
        now = time.monotonic()
        actors = self.actors.values()
        return {
            "actors_heard": len(actors),
            "actors_silent": sum(now - a.last_heard >= silent_after_s for a in actors),
            "actor_transitions_sent": sum(a.transitions_sent for a in actors),
            "env_steps": self.env_steps(),
            "actor_lives": sum(len(a.lives) for a in actors),
            "episode_messages_rejected": self.rejected,
            **self.faults(now),
        }

    def faults(self, now: float | None = None) -> dict:
        """The actors' env faults: their count, the env steps and items they cost, by kind
        (``{kind: [count, latest line]}``), and the actors whose envs are stuck in a step
        now (``{actor: seconds}``, from a heartbeat in the last ``STUCK_AFTER_S``)."""
        now = time.monotonic() if now is None else now
        stuck = {
            str(index): status.stuck_s
            for index, status in sorted(self.actors.items())
            if status.stuck_s and now - status.last_heard < STUCK_AFTER_S
        }
        return {**fault_totals(self.actors.values()), "actors_stuck": stuck}

    def env_steps(self) -> int:
        """Env steps every actor has reported, over all their lives."""
        return sum(a.env_steps for a in self.actors.values())

    def drain(self, limit: int = 1000) -> list[tuple[int, int, float, int]]:
        """Up to ``limit`` episodes as ``(actor, policy_version, return, length)``."""
        episodes = []
        for _ in range(limit):
            try:
                frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self.received += 1
            try:
                message = decode(frames, ApexKind)
                if message.kind == ApexKind.EVALUATION and self._on_evaluation is not None:
                    self._on_evaluation(message)
                    self.reports += 1
                    continue
                returns, lengths, counts, kinds = read_episodes(message)
            except ProtocolError:
                self.rejected += 1
                continue
            self.reports += 1
            self._heard(message.sender, message.incarnation, message.scalar, counts, kinds)
            for value, length in zip(returns.tolist(), lengths.tolist(), strict=True):
                episodes.append((message.sender, message.policy_version, value, length))
        return episodes

    def close(self) -> None:
        self._socket.close(linger=0)
