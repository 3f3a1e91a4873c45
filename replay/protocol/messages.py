"""Replay's messages, one class per kind: what each carries and how it is laid out.

``replay.wire.layout`` turns a :class:`~replay.wire.layout.Message` into frames and back
and checks the frame layout; this module gives each kind its meaning (SAMPLE_REPLY's, with
its frame stacks, in ``replay.protocol.sample_reply``). Every class has
``to_message`` (for the sender) and ``from_message`` (for the receiver), and
``from_message`` checks the arrays' count, dtypes and lengths and raises
:class:`ProtocolError`; field shapes and dtypes against a spec are checked where the
data is stored (``PrioritizedReplay.add``).

Per kind, the arrays are (``F`` = the shard spec's fields, in spec order)::

    INSERT        F…, priorities f64[count]                        actor → shard (PUSH)
    INSERT_FRAMES streams i64[m], numbers i64[m], starts bool[m],   actor → frame shard
                  then the frames: whole, (m, *frame) of the frame
                  dtype (scalar 0), or LZ4 blocks, data u8[n] and
                  offsets i64[m+1] (scalar 1); then the records R…
                  (``FrameStackSpec.record_spec``), priorities f64
    SAMPLE        none; count = batch size, scalar = β              learner → shard
    SAMPLE_REPLY  stats f64[4], indices i64, generations i64,
                  priorities f64 (stored p^α), weights f32, F…      shard → learner
                  stats = (total priority, min positive, size, capacity);
                  weights = (q_min / q_i)^β with this shard's q_min.
                  From a frame shard (scalar 1: LZ4, 2: whole frames),
                  F less obs and next_obs, then frame index
                  i32[count, 2k], frame data u8[n], frame offsets
                  i64[u+1] (``replay.frames.payload``)
    UPDATE        indices i64, generations i64, priorities f64      learner → shard
    INFO / SPEC   none                                              client → shard
    INFO_REPLY    utf-8 JSON object as u8[n] (counters only)        shard → client
    SPEC_REPLY    utf-8 JSON as u8[n]: {"fields": [[name, [dims],   shard → client
                  dtype], ...], "frames": null or {"stack": k,
                  "compressed": bool}} (a bare field list: version 1)
    ERROR         utf-8 text as u8[n]                               shard → requester
    CREDIT        none; scalar = the asker's lane number to wait    actor → shard
                  for, count = longest wait in ms
    CREDIT_REPLY  none; scalar = the lane number the shard expects  shard → actor
                  next from the asker (sent once it reaches the
                  asked number, or when the wait runs out); count =
                  window << 1 | resend; incarnation = the shard's;
                  held = 1 while its rate limiter refuses inserts

The credit (CREDIT, CREDIT_REPLY) is replay's flow control: an actor may have a bounded
number of insert batches sent and not yet taken by a shard (``replay.inserts.lane``): its
own share, or the shard's window divided among its active senders if that is more.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from replay.errors import ProtocolError
from replay.frames.payload import FrameInsert, check_count
from replay.store.spec import TransitionSpec
from replay.wire.layout import (
    Kind,
    Message,
    encode,
)
from replay.wire.packed import PackedEncoder
from replay.wire.text import array_json, array_text, text_array

__all__ = ["FrameInsert"]  # re-exported: writers build inserts from here

# The longest a shard holds a CREDIT request, whatever the asker asked for.
MAX_CREDIT_WAIT_MS = 10_000
# A CREDIT question's count: the wait in its low 31 bits, ``final`` in the top one.
FINAL_FLAG = 1 << 31
# Counts travel as f64 scalars; beyond 2^53 they are no longer exact.
MAX_EXACT_COUNT = 2.0**53


def expect_kind(message: Message, kind: Kind) -> None:
    """Raises ProtocolError unless ``message`` is of ``kind``."""
    if message.kind != kind:
        raise ProtocolError(f"expected {kind.name}, got {message.kind.name}")


@dataclass(frozen=True)
class Insert:
    """A batch of transitions and their initial priorities (not yet raised to α)."""

    fields: Mapping[str, np.ndarray]
    priorities: np.ndarray

    def to_message(self, spec: TransitionSpec, sender: int, sequence: int, version: int):
        arrays = (
            *(np.ascontiguousarray(self.fields[name]) for name in spec),
            np.ascontiguousarray(self.priorities, dtype=np.float64),
        )
        return Message(Kind.INSERT, sender, sequence, version, len(arrays[-1]), 0.0, arrays)

    @classmethod
    def from_message(cls, message: Message, spec: TransitionSpec) -> Insert:
        expect_kind(message, Kind.INSERT)
        if len(message.arrays) != len(spec) + 1:
            raise ProtocolError(
                f"{len(message.arrays)} arrays, expected {len(spec)} fields + priorities"
            )
        check_count(message)
        return cls(dict(zip(spec, message.arrays[:-1], strict=True)), message.arrays[-1])


class InsertEncoder:
    """Encodes :class:`Insert` messages of one spec: the frames of
    ``encode(Insert(batch, priorities).to_message(...))``, byte for byte, checked as
    ``TransitionSpec.check_batch`` checks, at a fraction of the cost for small batches
    (``replay.wire.packed.PackedEncoder``): an actor's inserts are its hot path.

    Raises (``encode``):
        InvalidBatchError: the batch does not match the spec.
    """

    def __init__(self, spec: TransitionSpec) -> None:
        self._spec = spec
        arrays = [(spec[name].dtype, spec[name].shape) for name in spec]
        self._packed = PackedEncoder(Kind.INSERT, [*arrays, (np.dtype(np.float64), ())])

    def encode(
        self,
        batch: Mapping[str, np.ndarray],
        priorities: np.ndarray,
        sender: int,
        sequence: int,
        policy_version: int,
    ) -> list:
        count = self._spec.check_batch(batch)
        arrays = [np.ascontiguousarray(batch[name]) for name in self._spec]
        arrays.append(np.ascontiguousarray(priorities, dtype=np.float64))
        if arrays[-1].shape == (count,):
            frames = self._packed.encode(arrays, count, sender, sequence, policy_version)
            if frames is not None:
                return frames
        # Too large to pack, or priorities the shard will refuse: the general way.
        message = Insert(batch, priorities).to_message(self._spec, sender, sequence, policy_version)
        return encode(message)


@dataclass(frozen=True)
class SampleRequest:
    """Asks a shard for ``batch_size`` prioritized transitions, weighted with ``beta``."""

    batch_size: int
    beta: float

    def to_message(self, sender: int, sequence: int) -> Message:
        return Message(Kind.SAMPLE, sender, sequence, count=self.batch_size, scalar=self.beta)

    @classmethod
    def from_message(cls, message: Message) -> SampleRequest:
        expect_kind(message, Kind.SAMPLE)
        if message.count <= 0 or not 0 <= message.scalar < math.inf:
            raise ProtocolError(
                f"SAMPLE needs count > 0 and finite beta >= 0, got batch {message.count}, "
                f"beta {message.scalar}"
            )
        return cls(message.count, message.scalar)


@dataclass(frozen=True)
class PriorityUpdate:
    """New priorities for sampled slots; fire-and-forget (the shard counts its outcome)."""

    indices: np.ndarray
    generations: np.ndarray
    priorities: np.ndarray

    def to_message(self, sender: int, sequence: int) -> Message:
        arrays = (
            np.ascontiguousarray(self.indices, dtype=np.int64),
            np.ascontiguousarray(self.generations, dtype=np.int64),
            np.ascontiguousarray(self.priorities, dtype=np.float64),
        )
        return Message(Kind.UPDATE, sender, sequence, count=len(arrays[0]), arrays=arrays)

    @classmethod
    def from_message(cls, message: Message) -> PriorityUpdate:
        expect_kind(message, Kind.UPDATE)
        arrays = message.arrays
        if len(arrays) != 3 or arrays[0].dtype != np.int64 or arrays[1].dtype != np.int64:
            raise ProtocolError("UPDATE needs int64 indices, int64 generations, priorities")
        return cls(*arrays)


@dataclass(frozen=True)
class CreditRequest:
    """Asks a shard to answer once it expects lane number ``wanted`` from the asker (see
    ``replay.server.lanes``), or after ``wait_ms`` (at most :data:`MAX_CREDIT_WAIT_MS`). The
    asker's incarnation, in the header, names its lane.

    ``final``: the asker is stopping and flushes what it has sent. While such a question
    is held, the shard takes inserts past its rate limiter (a queue shard keeps its room):
    with the learner stopping too, nothing might sample again, and what the shard never
    takes is lost with the actor. Sent as the count's top bit; an older shard reads a
    wait over :data:`MAX_CREDIT_WAIT_MS`, capped, and holds its limiter as before."""

    wanted: float
    wait_ms: int
    final: bool = False

    def to_message(self, sender: int, sequence: int) -> Message:
        count = max(0, min(int(self.wait_ms), FINAL_FLAG - 1)) | (FINAL_FLAG if self.final else 0)
        return Message(Kind.CREDIT, sender, sequence, count=count, scalar=float(self.wanted))

    @classmethod
    def from_message(cls, message: Message) -> CreditRequest:
        expect_kind(message, Kind.CREDIT)
        if not 0.0 <= message.scalar < MAX_EXACT_COUNT:  # also refuses NaN
            raise ProtocolError(f"CREDIT needs a count >= 0, got {message.scalar}")
        wait_ms = min(message.count & (FINAL_FLAG - 1), MAX_CREDIT_WAIT_MS)
        return cls(message.scalar, wait_ms, bool(message.count & FINAL_FLAG))


@dataclass(frozen=True)
class CreditReply:
    """The lane number the shard expects next from the asker (``taken``: it has every
    message below), whether it refused later ones for a gap (``resend``: send them again
    from ``taken``), and which life of the shard says so (``incarnation``, a random u32
    per shard process: a restarted shard may have lost what its predecessor confirmed)."""

    taken: float
    incarnation: int = 0
    resend: bool = False
    window: int = 0
    """Batches the asker may have in flight to this shard, if more than its own share."""
    limiter_holds: bool = False
    """The shard's rate limiter refuses inserts now: it takes nothing until someone
    samples, so a lane that sees nothing taken has lost nothing (an older shard, which
    does not say, sends 0 in this header field)."""

    def to_message(self, sender: int, sequence: int) -> Message:
        count = min(self.window, 2**31 - 1) << 1 | int(self.resend)
        return Message(
            Kind.CREDIT_REPLY,
            sender,
            sequence,
            count=count,
            scalar=float(self.taken),
            incarnation=self.incarnation,
            held=int(self.limiter_holds),
        )

    @classmethod
    def from_message(cls, message: Message) -> CreditReply:
        expect_kind(message, Kind.CREDIT_REPLY)
        return cls(
            message.scalar,
            message.incarnation,
            bool(message.count & 1),
            message.count >> 1,
            bool(message.held),
        )


def request(kind: Kind, sender: int, sequence: int) -> Message:
    """A request without payload: INFO or SPEC."""
    return Message(kind, sender, sequence)


def info_reply(counters: Mapping[str, object], sender: int, sequence: int) -> Message:
    return Message(Kind.INFO_REPLY, sender, sequence, arrays=(text_array(json.dumps(counters)),))


def read_info(message: Message) -> dict[str, object]:
    """The counters of an INFO_REPLY.

    Raises:
        ProtocolError: another kind, or a payload that is not a JSON object.
    """
    expect_kind(message, Kind.INFO_REPLY)
    if len(message.arrays) != 1:
        raise ProtocolError(f"INFO_REPLY has {len(message.arrays)} arrays, expected 1")
    info = array_json(message.arrays[0], "INFO_REPLY")
    if not isinstance(info, dict):
        raise ProtocolError("INFO_REPLY is not a JSON object")
    return info


def spec_reply(
    spec: TransitionSpec, sender: int, sequence: int, frames: dict | None = None
) -> Message:
    """The shard's transition spec (what the learner samples) and, for a frame shard, its
    frame layout (``{"stack": k, "compressed": bool}``: what its writers send)."""
    entries = [[name, list(shape), dtype] for name, (shape, dtype) in spec.to_dict().items()]
    payload = json.dumps({"fields": entries, "frames": frames})
    return Message(Kind.SPEC_REPLY, sender, sequence, arrays=(text_array(payload),))


def read_spec(message: Message) -> TransitionSpec:
    """The spec of a SPEC_REPLY.

    Raises:
        ProtocolError: another kind, or not a valid spec payload.
    """
    return _spec_payload(message)[0]


def read_frame_layout(message: Message) -> dict | None:
    """A SPEC_REPLY's frame layout: None for a shard of whole transitions.

    Raises:
        ProtocolError: another kind, or not a valid spec payload.
    """
    return _spec_payload(message)[1]


def _spec_payload(message: Message) -> tuple[TransitionSpec, dict | None]:
    expect_kind(message, Kind.SPEC_REPLY)
    if len(message.arrays) != 1:
        raise ProtocolError(f"SPEC_REPLY has {len(message.arrays)} arrays, expected 1")
    payload = array_json(message.arrays[0], "spec payload")
    try:
        entries, frames = (
            (payload["fields"], payload.get("frames"))
            if isinstance(payload, dict)
            else (payload, None)
        )
        if not isinstance(entries, list) or not (frames is None or isinstance(frames, dict)):
            raise TypeError("fields must be a list and frames an object or null")
        spec = TransitionSpec.from_dict({str(n): (tuple(s), str(d)) for n, s, d in entries})
        if frames is not None:
            frames = {"stack": int(frames["stack"]), "compressed": bool(frames["compressed"])}
        return spec, frames
    except (IndexError, KeyError, ValueError, TypeError) as exc:
        raise ProtocolError(f"malformed spec payload: {exc}") from exc


def error(text: str, sender: int, sequence: int) -> Message:
    return Message(Kind.ERROR, sender, sequence, arrays=(text_array(text),))


def read_error(message: Message) -> str:
    expect_kind(message, Kind.ERROR)
    try:
        return array_text(message.arrays[0])
    except IndexError:
        raise ProtocolError("ERROR without text") from None
