"""A shard's SAMPLE requests: answered at once when the store and its limiter allow it,
held otherwise and answered in the loop once they do.

Held requests wait in a bounded list (``max_waiting_samples``), oldest first; when it is
full the oldest goes, since its asker has re-asked by then (a learner gives up on a
request after its timeout). Refusing the newest instead had a learner blocked by the rate
limiter re-asking and being refused in a loop. A sender heard on a new connection (a
restarted learner, a reconnect) has left its old one, and what it held there goes too:
the answers would go nowhere, and a queue shard hands each item out once, so a killed
IMPALA learner's held requests took the next batches of unrolls with it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from replay.errors import ProtocolError, ReplayError
from replay.protocol import messages
from replay.protocol.sample_reply import SampleReply
from replay.server.config import ShardConfig
from replay.server.ingest import Ingest
from replay.server.rate_limiter import QueueLimiter, RateLimiter
from replay.server.senders import REJECT_REQUEST, UNKNOWN_SENDER
from replay.wire.layout import Message


class SampleDesk:
    """Answers and holds SAMPLE requests.

    Args:
        config: the shard's settings (``max_sample_batch``, ``max_waiting_samples``).
        limiter: the shard's rate or queue limiter.
        ingest: the shard's ingest now (a restore may replace it), whose store samples.
        send: ``send(identity, message)`` on the shard's ROUTER.
        refuse: ``refuse(identity, message, reason, text)``: counts and answers a refusal.
    """

    def __init__(
        self,
        config: ShardConfig,
        limiter: RateLimiter | QueueLimiter,
        ingest: Callable[[], Ingest],
        send: Callable[[bytes, Message], None],
        refuse: Callable[[bytes, Message, str, str], None],
    ) -> None:
        self._config = config
        self._limiter = limiter
        self._ingest = ingest
        self._send = send
        self._refuse = refuse
        # (identity, sequence, request, sender), oldest first
        self._waiting: deque[tuple[bytes, int, messages.SampleRequest, int]] = deque()
        self._connections: dict[int, bytes] = {}  # each sender's latest identity
        self.served = 0
        self.transitions = 0
        self.dropped = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def heard(self, identity: bytes, sender: int) -> None:
        """Any request of ``sender`` on ``identity``: held requests of its other
        connections are dropped (counted in ``dropped``). Not for the pooled id, which
        many peers share."""
        if sender == UNKNOWN_SENDER:
            return
        if self._connections.get(sender, identity) != identity:
            kept = deque(w for w in self._waiting if w[3] != sender or w[0] == identity)
            self.dropped += len(self._waiting) - len(kept)
            self._waiting = kept
        self._connections[sender] = identity

    def ask(self, identity: bytes, message: Message) -> None:
        """A SAMPLE request: answered now, held, or refused (malformed, too large, or no
        request may wait)."""
        largest = self._config.max_sample_batch
        try:
            request = messages.SampleRequest.from_message(message)
            if request.batch_size > largest:
                raise ProtocolError(
                    f"SAMPLE of {request.batch_size} exceeds this shard's "
                    f"max_sample_batch {largest}"
                )
        except ProtocolError as exc:
            self._refuse(identity, message, REJECT_REQUEST, str(exc))
            return
        if not self._waiting and self._ready(request):
            self._answer(identity, message.sequence, request)
        elif self._config.max_waiting_samples:
            if len(self._waiting) >= self._config.max_waiting_samples:
                self._waiting.popleft()
                self.dropped += 1
            self._waiting.append((identity, message.sequence, request, message.sender))
        else:
            self._refuse(identity, message, REJECT_REQUEST, "no SAMPLE request may wait")

    def answer_waiting(self) -> None:
        """Answers held requests, oldest first, while the store and limiter allow."""
        while self._waiting and self._ready(self._waiting[0][2]):
            identity, sequence, request, _ = self._waiting.popleft()
            self._answer(identity, sequence, request)

    def _ready(self, request: messages.SampleRequest) -> bool:
        return self._limiter.can_sample(self._ingest().replay.size, request.batch_size)

    def _answer(self, identity: bytes, sequence: int, request: messages.SampleRequest) -> None:
        ingest = self._ingest()
        replay, index = ingest.replay, self._config.shard_index
        try:
            sample = replay.sample(request.batch_size, request.beta, packed=ingest.packs_samples)
        except ReplayError as exc:  # e.g. every stored priority is zero
            self._send(identity, messages.error(f"cannot sample: {exc}", index, sequence))
            return
        reply = SampleReply(
            replay.total_priority,
            replay.min_priority,
            replay.size,
            replay.capacity,
            sample.indices,
            sample.generations,
            sample.priorities,
            sample.weights,
            sample.transitions,
            sample.frames,
        )
        self._send(identity, reply.to_message(index, sequence))
        self._limiter.record_sample(request.batch_size)
        self.served += 1
        self.transitions += request.batch_size
