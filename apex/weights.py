"""The learner's weights to the actors: its PUB socket sends WEIGHTS messages (parameter
names as JSON, then one raw array per parameter, the version in the header, and in the
header's scalar the env steps the actors had reported: the evaluator's cadence). Each
actor's SUB keeps at most a couple of messages (PUB drops for slow subscribers), and
``WeightSubscriber.poll`` drains what has arrived and loads only the newest. ZeroMQ's
CONFLATE cannot be used: it does not support multipart messages.

Weights that do not fit (malformed, other parameter names or shapes) are counted and
skipped, never loaded. The message kind is apex's (``apex.channels.ApexKind``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np
import zmq

from apex.channels import ApexKind
from replay.errors import ProtocolError
from replay.wire.layout import Message, decode, encode
from replay.wire.text import array_json, text_array
from replay.wire.transport import bind, make_socket, send_frames

if TYPE_CHECKING:  # torch only for the learner's side; actors run without it
    import torch

logger = logging.getLogger(__name__)

WEIGHTS_HWM = 1
SUBSCRIPTIONS_HWM = 1000
FLOAT32_MAX = float(np.finfo(np.float32).max)
# A PUB keeps the oldest messages when a subscriber's queue is full and drops the newest,
# and kernel buffers left to themselves hold megabytes: an actor that polled after a while
# read weights seconds old (policy lag p50 44 versions with 4 actors of 64 envs). Small
# buffers and one queued message keep at most a couple of versions between the two.
WEIGHTS_KERNEL_BUFFER_BYTES = 131072
# A learner whose run has ended says so this long, this often (WeightPublisher.end_run).
RUN_ENDED_FOR_S = 0.5
RUN_ENDED_EVERY_S = 0.05


class WeightPublisher:
    """The learner's side: publishes a module's parameters with a version."""

    def __init__(
        self, context: zmq.Context, host: str = "127.0.0.1", port: int = 0, sender: int = 0
    ):
        self._socket = make_socket(
            context, zmq.PUB, WEIGHTS_HWM, kernel_buffer_bytes=WEIGHTS_KERNEL_BUFFER_BYTES
        )
        # A PUB receives only subscriptions. Behind a ZAP handler (replay.wire.security), one
        # with RCVHWM 1 never delivered a message (libzmq 4.3.5, measured); the weights'
        # freshness depends on SNDHWM alone.
        self._socket.setsockopt(zmq.RCVHWM, SUBSCRIPTIONS_HWM)
        self.endpoint = bind(self._socket, host, port)
        self._sender = sender
        self._sequence = 0

    def publish(
        self, module: torch.nn.Module, version: int, env_steps: int = 0, trained: int = 0
    ) -> None:
        """Sends ``module``'s parameters as ``version``; ``env_steps``: what the actors
        had reported (the evaluator's cadence); ``trained``: the updates the publishing
        learner has made since it started (0: none yet), in the header's count."""
        self.publish_state(module.state_dict(), version, env_steps, trained)

    def publish_state(
        self, state: Mapping[str, torch.Tensor], version: int, env_steps: int = 0, trained: int = 0
    ) -> None:
        """:meth:`publish` of a module's ``state_dict`` (or a copy of it)."""
        arrays = [text_array(json.dumps(list(state)))]
        arrays += [np.ascontiguousarray(tensor.detach().cpu().numpy()) for tensor in state.values()]
        # One frame, never a multipart message: libzmq 4.3.5 aborts the sending process
        # (session_base.cpp:233, libzmq issue #3442) when a PUB's subscriber goes away in
        # the middle of one, which an actor killed during a publish would do. Measured:
        # 1 in 3 teardowns of 8 subscribers aborted with multipart weights, 0 in 12 packed.
        message = Message(
            ApexKind.WEIGHTS,
            self._sender,
            self._sequence,
            version,
            trained,
            float(env_steps),
            tuple(arrays),
        )
        frames = encode(message, max_packed_bytes=sys.maxsize)
        self._sequence += 1
        with contextlib.suppress(zmq.Again):  # no subscriber has room: they get the next one
            send_frames(self._socket, frames, zmq.NOBLOCK)

    def end_run(self, seconds: float = RUN_ENDED_FOR_S) -> None:
        """Tells the subscribers the run has ended (actors stop): said again and again for
        ``seconds``, since a subscriber's one-message queue may hold weights still."""
        message = Message(ApexKind.RUN_ENDED, self._sender, self._sequence, -1, 0, 0.0, ())
        frames = encode(message)
        deadline = time.monotonic() + seconds
        while True:
            with contextlib.suppress(zmq.Again):
                send_frames(self._socket, frames, zmq.NOBLOCK)
            if time.monotonic() >= deadline:
                return
            time.sleep(RUN_ENDED_EVERY_S)

    def close(self) -> None:
        self._socket.close(linger=0)


class Publications:
    """A learner's publications: each version with the updates behind it and the learner's
    training time when it went out (for the evaluations made on it: a solve is timed at the
    publication of the weights that passed, not when the evaluator's verdict came), sent
    again while the learner waits for data, since a PUB reaches only the subscribers it has
    when it sends and an actor that joined since (a lock-step one waits on them) must get
    them.

    Args:
        publisher: the learner's PUB.
        resend_every_s: how often weights go again while nothing new is published.
        kept: publications remembered.
    """

    def __init__(self, publisher: WeightPublisher, resend_every_s: float, kept: int) -> None:
        self._publisher = publisher
        self._resend_every_s = resend_every_s
        self._published: deque[tuple[int, int, float]] = deque(maxlen=kept)
        self._resend_at = 0.0
        self._life_start_updates = 0

    @property
    def endpoint(self) -> str:
        return self._publisher.endpoint

    def begin_life(self, updates: int) -> None:
        """The learner starts (or resumes at ``updates``): later weights carry the updates
        of this life, which lock-step actors wait on (``apex.acting.actor``)."""
        self._life_start_updates = updates

    def publish(
        self,
        module: torch.nn.Module,
        version: int,
        updates: int,
        env_steps: int,
        time_s: float = 0.0,
    ) -> None:
        """A new version, made after ``updates``, at ``time_s`` of the learner's training."""
        self._published.append((version, updates, time_s))
        self._send_state(module.state_dict(), version, updates, env_steps)

    def send(self, module: torch.nn.Module, version: int, updates: int, env_steps: int) -> None:
        """Sends ``version`` (again, if it was published before)."""
        self._send_state(module.state_dict(), version, updates, env_steps)

    def _send_state(
        self, state: Mapping[str, torch.Tensor], version: int, updates: int, env_steps: int
    ) -> None:
        trained = updates - self._life_start_updates  # 0: this life's first weights
        self._publisher.publish_state(state, version, env_steps, trained)
        self._resend_at = time.monotonic() + self._resend_every_s

    def resend_due(self) -> bool:
        return time.monotonic() >= self._resend_at

    def updates_behind(self, version: int) -> int | None:
        """The updates made before ``version`` was published (None: not remembered)."""
        return next((updates for v, updates, _ in reversed(self._published) if v == version), None)

    def published_at_s(self, version: int) -> float | None:
        """The learner's training seconds when ``version`` was first published (None: not
        remembered)."""
        return next((time_s for v, _, time_s in reversed(self._published) if v == version), None)

    def end_run(self) -> None:
        """The run has ended: the actors are told to stop (``WeightPublisher.end_run``)."""
        self._publisher.end_run()

    def close(self) -> None:
        self._publisher.close()


def read_weights(message: Message, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The parameters of a WEIGHTS message, by name, checked against ``shapes`` (names
    in order, each array's shape; dtypes are the taker's to cast).

    Raises:
        ProtocolError: another kind, other names, or an array of another shape.
    """
    if message.kind != ApexKind.WEIGHTS or not message.arrays:
        raise ProtocolError(f"expected WEIGHTS with arrays, got {message.kind.name}")
    names = array_json(message.arrays[0], "WEIGHTS names")
    if names != list(shapes):
        raise ProtocolError("parameter names differ from this actor's network")
    if len(message.arrays) != 1 + len(shapes):
        raise ProtocolError(f"{len(message.arrays) - 1} arrays for {len(shapes)} parameters")
    arrays = {}
    for name, array in zip(names, message.arrays[1:], strict=True):
        if tuple(array.shape) != tuple(shapes[name]) or array.dtype.kind != "f":
            raise ProtocolError(f"{name}: {array.dtype}{array.shape} is not float{shapes[name]}")
        # A diverged learner's, or a forger's; the taker keeps float32, so a float64
        # value past its range would become infinite there.
        if not np.isfinite(array).all() or (
            array.dtype.itemsize > 4 and array.size and np.abs(array).max() > FLOAT32_MAX
        ):
            raise ProtocolError(f"{name} holds NaN, infinite or beyond-float32 values")
        arrays[name] = array
    return arrays


class WeightTaker(Protocol):
    """What takes published weights: an actor's policy (see apex.algorithms.policy)."""

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each parameter's name and shape, in the order the learner publishes them."""

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Takes a full set of parameters (checked against :meth:`parameter_shapes`)."""


class WeightSubscriber:
    """An actor's side: loads the newest published weights into its policy.

    ``every_versions``: load weights only once they are at least this many versions newer
    than those held (1: always the newest). Above 1 the actor acts with older policies on
    purpose: the policy-lag study of V-trace."""

    def __init__(self, context: zmq.Context, endpoint: str, every_versions: int = 1) -> None:
        self._every_versions = every_versions
        self._socket = make_socket(
            context, zmq.SUB, WEIGHTS_HWM, kernel_buffer_bytes=WEIGHTS_KERNEL_BUFFER_BYTES
        )
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._socket.connect(endpoint)
        self.version = -1
        self.env_steps = 0
        """What the actors had reported when the loaded weights were published."""
        self.trained = 0
        """The updates the learner had made since it started when it published the loaded
        weights (0: its first weights, or none loaded)."""
        self.received = 0
        """Messages taken off the socket: each is loaded, rejected, stale (not newer than
        the loaded version), superseded (a newer one came in the same poll) or an end
        (the learner's word that the run is over)."""
        self.loaded = 0
        self.learner_restarts = 0
        """Weights taken from a learner that had restarted (its count went down)."""
        self.rejected = 0
        self.stale = 0
        self.superseded = 0
        self.ends = 0

    def poll(self, policy: WeightTaker, timeout_ms: int = 0) -> bool:
        """Loads the newest weights that arrived, if newer than the current ones.

        Returns:
            True if new weights were loaded.
        """
        newest = None
        if not self._socket.poll(timeout_ms):
            return False
        drained = 0
        while True:
            try:
                newest = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            drained += 1
        if not drained:
            return False
        self.received += drained
        self.superseded += drained - 1
        try:
            message = decode(newest, ApexKind)
            if message.kind == ApexKind.RUN_ENDED:
                self.ends += 1
                return False
            held = self.version
            # A learner's count of updates only grows within its life: a smaller one is a
            # restarted learner's, whose versions resume from its checkpoint and may lie
            # below those held. Its weights load at once.
            restarted = message.count < self.trained
            if not restarted and (
                message.policy_version <= held
                or (held >= 0 and message.policy_version < held + self._every_versions)
            ):
                self.stale += 1
                return False
            arrays = read_weights(message, policy.parameter_shapes())
        except ProtocolError as exc:
            self.rejected += 1
            if self.rejected == 1:
                logger.warning("ignoring weights that do not fit this actor: %s", exc)
            return False
        policy.load(arrays)
        self.learner_restarts += restarted
        self.version = message.policy_version
        self.trained = message.count
        if 0.0 <= message.scalar < 2.0**53:  # also refuses NaN
            self.env_steps = int(message.scalar)
        self.loaded += 1
        return True

    @property
    def run_ended(self) -> bool:
        """The learner said its run has ended (``WeightPublisher.end_run``)."""
        return self.ends > 0

    def counts(self) -> dict[str, int]:
        """What became of the messages received (for an actor's last log line)."""
        return {
            "weights_received": self.received,
            "weights_loaded": self.loaded,
            "weights_rejected": self.rejected,
            "weights_stale": self.stale,
            "weights_superseded": self.superseded,
        }

    def close(self) -> None:
        self._socket.close(linger=0)
