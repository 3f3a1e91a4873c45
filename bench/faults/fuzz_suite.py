"""Fuzz suite: a live shard (a real ``apex replay`` process, real TCP) takes a stream of
hostile messages on each of its two endpoints, mixed with valid traffic, and must come out
alive, with every valid transition present, every hostile message counted, and nothing
served that was not inserted.

Phase 1, the insert endpoint: one connection sends hostile inserts
(``bench.faults.fuzz_messages``), valid inserts under invented sender ids, and floods of valid
inserts under one id; a real actor on its own connection inserts now and then. Phase 2,
the request endpoint: one connection sends hostile requests, reading the shard's replies
as they come, while the learner samples and sends well-formed priority updates that name
no stored item (forged: empty slots at generation -1, generations past the newest,
slots outside the store, priorities that are not finite), each followed on the same
connection by a sample.

The checks, exact where the shard keeps a count:

* every message sent was taken (insert messages) or counted as a request;
* the rejections rose by exactly the number of hostile messages, and each reason's
  dropped updates by exactly the forged updates of that reason;
* every sampled row (``RowAudit``: after each forged update, every 250 requests and 500
  inserts, and the whole store at the end) is one that was inserted: every field holds
  its id, the id was sent, its slot and generation are written ones;
* the transitions added are exactly the valid ones sent; sampling the whole store
  (uniform priorities, 20 draws per slot) returns only ids that were sent, and all of
  them;
* the real actor keeps its own account (a connection inventing ids gets at most
  ``MAX_SENDERS_PER_PEER`` entries; its other ids are pooled);
* no priority was rewritten by a hostile or forged update;
* the shard's memory (RSS) grew by at most ``RSS_GROWTH_LIMIT_BYTES`` beyond what the
  valid transitions fill, and its log by at most ``LOG_LINES_LIMIT`` lines; it answered
  INFO afterwards and exited 0 on SIGTERM.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zmq

from bench.faults.fuzz_endpoints import (
    fuzz_episode_socket,
    fuzz_shard,
    fuzz_weight_subscription,
    settle,
    written_rows,
)
from bench.faults.fuzz_messages import HostileMessages, transition_ids
from launch.supervision.role_process import RoleProcess, RoleStartError
from replay.errors import ReplayTimeout
from replay.protocol.requests import RequestClient
from replay.server.senders import MAX_SENDERS_PER_PEER
from replay.store.spec import TransitionSpec
from replay.wire.transport import make_socket, send_frames

SUITE = "fuzz"
SPEC = TransitionSpec.from_dict(
    {
        "obs": ((4,), "float32"),
        "action": ((), "int64"),
        "reward": ((), "float32"),
        "discount": ((), "float32"),
        "next_obs": ((4,), "float32"),
    }
)
REAL_ACTOR = 7
FLOODER = 8
LEARNER = 9
VALID_BATCH = 4
VALID_TRANSITIONS_PER_MESSAGE_BOUND = 8
RSS_GROWTH_LIMIT_BYTES = 64 << 20
# What one stored transition of SPEC may touch: its 48 bytes of fields, priority, tree
# leaf and generation, rounded up generously.
STORED_BYTES_PER_TRANSITION = 256
LOG_LINES_LIMIT = 200
DRAWS_PER_SLOT = 20
AUDIT_EVERY = 500  # insert-endpoint messages between audited samples
START_TIMEOUT_S = 60.0


def rss_bytes(pid: int) -> int:
    """Resident memory of a process on this host (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class FuzzedShard:
    """An ``apex replay`` process with its log in a file (to measure how much it wrote)."""

    def __init__(self, capacity: int, log_path: Path) -> None:
        fields = [
            o
            for name, (shape, dtype) in SPEC.to_dict().items()
            for o in ("--field", f"{name}:{','.join(map(str, shape))}:{dtype}")
        ]
        self.log_path = log_path
        log_path.write_text("")
        self.role = RoleProcess.apex(
            "replay", "--capacity", str(capacity), *fields, log_path=log_path, name="fuzzed shard"
        )
        self.process = self.role.process
        try:
            endpoints = self.role.await_ready(START_TIMEOUT_S)
        except RoleStartError:
            self.stop()
            raise
        self.insert, self.request = endpoints["insert"], endpoints["request"]

    def log_lines(self) -> int:
        return len(self.log_path.read_text().splitlines())

    def stop(self) -> int:
        try:
            return self.role.stop(30.0)
        finally:
            self.role.close()


def _totals(info: dict) -> dict[str, int]:
    senders = info["senders"].values()
    learner = info["senders"].get(str(LEARNER), {"requests": 0})
    return {
        "taken": sum(s["insert_messages_taken"] for s in senders),
        "inserts": sum(s["inserts"] for s in senders),
        "requests": sum(s["requests"] for s in senders) - learner["requests"],
        "rejected": info["rejected_total"],
        "transitions": info["transitions_added"],
        "updates": info["updates_applied"],
        **{f"dropped_{reason}": count for reason, count in info["updates_dropped"].items()},
    }


class RowAudit:
    """Checks every sampled row against what was inserted: each field of a valid row holds
    its transition id (``HostileMessages.batch``), an id already sent, in a slot the store
    has written (``bench.faults.fuzz_endpoints.written_rows``)."""

    def __init__(self) -> None:
        self.rows_checked = 0
        self.bad_rows = 0

    def check(self, sample, ids_sent: int, size: int) -> None:
        n = len(sample.indices)
        obs = sample.fields["obs"].reshape(n, -1)
        ids = np.where(np.isfinite(obs[:, 0]), obs[:, 0], -1).astype(np.int64)
        good = (ids >= 0) & (ids < ids_sent)
        for name in SPEC:
            field = sample.fields[name].reshape(n, -1)
            good &= (field == ids[:, None].astype(field.dtype)).all(axis=1)
        good &= written_rows(sample, size)
        self.rows_checked += n
        self.bad_rows += int((~good).sum())


def run_fuzz(messages: int, seed: int = 0, progress: Callable[[str], None] | None = None) -> dict:
    """Fuzzes a fresh shard with ``messages`` messages per endpoint; returns what was sent,
    what the shard counted, the checks (name -> passed) and the rates."""
    rng = np.random.default_rng(seed)
    make = HostileMessages(SPEC, rng)
    # Room for every valid transition (about 4.4 a message: floods, invented ids, the
    # actor), so none is evicted and presence can be checked (the check also asks it).
    capacity = messages * VALID_TRANSITIONS_PER_MESSAGE_BOUND + 4096
    with tempfile.TemporaryDirectory(prefix="apex-fuzz-") as directory:
        shard = FuzzedShard(capacity, Path(directory) / "shard.log")
        context = zmq.Context()
        progress = progress or (lambda _: None)
        try:
            outcome = _fuzz(shard, context, make, rng, messages, progress)
            progress(f"fuzz: {messages} descriptor-level messages per decoding endpoint")
            outcome["descriptor"] = {
                "shard": fuzz_shard(
                    shard.insert, shard.request, SPEC, context, rng, messages, LEARNER
                ),
                "learner_episodes": fuzz_episode_socket(context, rng, messages),
                "actor_weights": fuzz_weight_subscription(context, rng, messages),
            }
            for part in outcome["descriptor"].values():
                outcome["checks"].update(part.pop("checks"))
            outcome["checks"]["shard_alive_after_everything"] = shard.process.poll() is None
            return outcome
        finally:
            context.destroy(linger=0)
            code = shard.stop()
            if code != 0:
                raise RuntimeError(f"the fuzzed shard exited {code}")


def _fuzz(shard, context, make, rng, messages: int, progress) -> dict:
    learner = RequestClient(context, shard.request, sender=LEARNER, timeout_s=10.0)
    hostile = make_socket(context, zmq.PUSH, hwm=256)
    actor = make_socket(context, zmq.PUSH, hwm=64)
    flooder = make_socket(context, zmq.PUSH, hwm=256)
    for socket in (hostile, actor, flooder):
        socket.connect(shard.insert)
    next_id, actor_transitions, valid_messages = 0, 0, 0
    sent_cases: Counter[str] = Counter()

    def valid(socket, sender: int) -> None:
        nonlocal next_id, valid_messages
        send_frames(socket, make.valid_insert(sender, next_id, VALID_BATCH))
        next_id += VALID_BATCH
        valid_messages += 1

    valid(actor, REAL_ACTOR)
    actor_transitions += VALID_BATCH
    start = settle(learner, lambda i: i["transitions_added"] == VALID_BATCH, "seed insert")
    valid_messages = 0  # from here on: the fuzz's
    rss_start, log_start, before = rss_bytes(shard.process.pid), shard.log_lines(), _totals(start)
    names = sorted(make.insert_cases)
    audit = RowAudit()
    capacity = start["capacity"]
    progress(f"fuzz: {messages} messages on the insert endpoint")
    started = time.monotonic()
    hostile_inserts = 0
    for number in range(messages):
        roll = rng.random()
        if roll < 0.1:
            valid(hostile, int(rng.integers(10_000, 2**32)))  # invented ids, valid data
        elif roll < 0.2:
            for _ in range(int(rng.integers(1, 20))):  # a flood of one sender
                valid(flooder, FLOODER)
        else:
            case = names[int(rng.integers(0, len(names)))]
            send_frames(hostile, make.insert_cases[case]())
            sent_cases[f"insert/{case}"] += 1
            hostile_inserts += 1
        if number % 100 == 0:
            valid(actor, REAL_ACTOR)
            actor_transitions += VALID_BATCH
        if number % AUDIT_EVERY == 0:
            audit.check(learner.sample(32, 0.4, SPEC), next_id, capacity)
    sent_pull = hostile_inserts + valid_messages
    after_inserts = settle(
        learner,
        lambda i: _totals(i)["taken"] - before["taken"] >= sent_pull,
        "every insert message taken",
    )
    insert_seconds = time.monotonic() - started
    middle = _totals(after_inserts)
    size = after_inserts["size"]

    progress(f"fuzz: {messages} messages on the request endpoint")
    dealer = make_socket(context, zmq.DEALER, hwm=1024)
    dealer.connect(shard.request)
    names = sorted(make.request_cases)
    hostile_requests, forged_sent, replies, bad_samples = 0, 0, 0, 0
    forged_drops: Counter[str] = Counter()
    sample_seconds: list[float] = []
    started = time.monotonic()
    for number in range(messages):
        if rng.random() < 0.1:
            # On the learner's own connection, so the sample after it is answered after
            # it was applied: what the shard serves right after each forged update.
            *update, reason = make.forged_update(size, capacity)
            learner.update(*update)
            forged_sent += 1
            forged_drops[reason] += len(update[0])
            audit.check(learner.sample(32, 0.4, SPEC), next_id, size)
        else:
            case = names[int(rng.integers(0, len(names)))]
            send_frames(dealer, make.request_cases[case](size))
            sent_cases[f"request/{case}"] += 1
            hostile_requests += 1
        while dealer.poll(0):
            dealer.recv_multipart()
            replies += 1
        if number % 250 == 0:  # the learner's service, in the middle of it all
            asked = time.monotonic()
            try:
                sample = learner.sample(32, 0.4, SPEC)
                sample_seconds.append(time.monotonic() - asked)
                audit.check(sample, next_id, size)
            except ReplayTimeout:
                bad_samples += 1
    request_seconds = time.monotonic() - started
    protocol_before = after_inserts["rejected"].get("protocol", 0)

    def counted_requests(info: dict) -> int:
        protocol = info["rejected"].get("protocol", 0) - protocol_before
        return _totals(info)["requests"] - middle["requests"] + protocol

    final = settle(
        learner, lambda i: counted_requests(i) >= hostile_requests, "every request counted"
    )

    end = _totals(final)
    rss_end, log_end = rss_bytes(shard.process.pid), shard.log_lines()
    present = _sampled_ids(learner, final["size"], audit, next_id)
    senders = final["senders"]
    forged = [s for s in senders if s.isdigit() and int(s) >= 10_000]
    checks = {
        "alive_and_answering": final["size"] == size,
        "every_insert_message_taken": middle["taken"] - before["taken"] == sent_pull,
        "hostile_inserts_all_rejected": middle["rejected"] - before["rejected"] == hostile_inserts,
        "valid_inserts_all_accepted": middle["inserts"] - before["inserts"] == valid_messages,
        "transitions_exactly_the_valid_ones": final["transitions_added"] == next_id,
        "store_never_full": next_id <= final["capacity"],
        "hostile_requests_all_rejected": end["rejected"] - middle["rejected"] == hostile_requests,
        "forged_updates_all_read": end["updates"] - middle["updates"] == forged_sent,
        "forged_updates_dropped_by_reason": all(
            end[f"dropped_{reason}"] - middle[f"dropped_{reason}"] == forged_drops[reason]
            for reason in final["updates_dropped"]
        ),
        "every_request_counted": counted_requests(final) == hostile_requests,
        # Every valid transition went in with priority 1, so the total is the size.
        "no_priority_rewritten": abs(final["total_priority"] - final["size"]) < 1e-6 * size,
        "every_valid_transition_present": present == set(range(next_id)),
        "real_actor_keeps_its_account": senders[str(REAL_ACTOR)]["transitions"]
        == actor_transitions,
        # Two connections invent ids (hostile inserts, hostile requests).
        "invented_ids_capped": len(forged) <= 2 * MAX_SENDERS_PER_PEER,
        "learner_samples_answered": bad_samples == 0,
        "no_bad_row_served": audit.bad_rows == 0 and audit.rows_checked > 0,
        # The store's pages are touched as valid data fills it; beyond that, nothing.
        "memory_bounded": rss_end - rss_start
        <= RSS_GROWTH_LIMIT_BYTES + next_id * STORED_BYTES_PER_TRANSITION,
        "log_bounded": log_end - log_start <= LOG_LINES_LIMIT,
    }
    for socket in (hostile, actor, flooder, dealer):
        socket.close(linger=0)
    learner.close()
    return {
        "messages_per_endpoint": messages,
        "hostile_inserts": hostile_inserts,
        "valid_insert_messages": valid_messages,
        "hostile_requests": hostile_requests,
        "forged_updates": forged_sent,
        "forged_updates_dropped": dict(sorted(forged_drops.items())),
        "rows_checked": audit.rows_checked,
        "bad_rows_served": audit.bad_rows,
        "replies_read": replies,
        "cases": dict(sorted(sent_cases.items())),
        "rejected_by_reason": final["rejected"],
        "insert_messages_per_s": sent_pull / insert_seconds,
        "request_messages_per_s": messages / request_seconds,
        "learner_sample_p50_ms": 1000 * float(np.median(sample_seconds))
        if sample_seconds
        else None,
        "rss_growth_bytes": rss_end - rss_start,
        "log_lines": log_end - log_start,
        "tracked_invented_ids": len(forged),
        "checks": checks,
    }


def _sampled_ids(learner: RequestClient, size: int, audit: RowAudit, ids_sent: int) -> set[int]:
    """Every id a whole-store sample returns (``DRAWS_PER_SLOT`` draws per slot), each
    row audited."""
    seen: set[int] = set()
    draws = size * DRAWS_PER_SLOT
    batch = min(8192, max(size, 1))
    for _ in range(-(-draws // batch)):
        sample = learner.sample(batch, 0.0, SPEC)
        audit.check(sample, ids_sent, size)
        seen.update(transition_ids(sample.fields["obs"]).tolist())
    return seen


def run(messages: int, seed: int = 0, progress: Callable[[str], None] | None = None) -> dict:
    """The suite: one fuzz run, as benchmark records and a config with the checks."""
    outcome = run_fuzz(messages, seed, progress)
    base = {
        "suite": SUITE,
        "case": f"{messages} per endpoint",
        "implementation": "apex",
        "status": "ok",
        "repeats": 1,
        "params": {"seed": seed},
    }
    descriptor = outcome["descriptor"]
    rows = [
        ("hostile insert messages", "messages", outcome["hostile_inserts"]),
        ("hostile request messages", "messages", outcome["hostile_requests"]),
        ("insert endpoint", "messages/s", outcome["insert_messages_per_s"]),
        ("request endpoint", "messages/s", outcome["request_messages_per_s"]),
        ("shard RSS growth", "bytes", max(outcome["rss_growth_bytes"], 0)),
        ("shard log lines", "lines", outcome["log_lines"]),
        ("checks passed", "checks", sum(outcome["checks"].values())),
        (
            "sampled rows checked",
            "rows",
            outcome["rows_checked"] + descriptor["shard"]["rows_checked"],
        ),
        (
            "bad rows served",
            "rows",
            outcome["bad_rows_served"] + descriptor["shard"]["bad_rows_served"],
        ),
        ("descriptor messages, shard insert", "messages", descriptor["shard"]["insert_messages"]),
        ("descriptor messages, shard request", "messages", descriptor["shard"]["request_messages"]),
        (
            "descriptor messages, learner episodes",
            "messages",
            descriptor["learner_episodes"]["messages"],
        ),
        ("descriptor messages, actor weights", "messages", descriptor["actor_weights"]["messages"]),
    ]
    records = [
        {**base, "metric": metric, "unit": unit, "median": value, "min": value, "max": value}
        for metric, unit, value in rows
    ]
    return {"records": records, "ratios": [], "config": outcome}
