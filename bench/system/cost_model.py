"""The cluster cost model behind ``apex bench model``: cores, shards and bandwidth from unit
costs, as plain arithmetic on measured figures (``bench.system.cost_units`` measures them).

Every role's CPU is a sum of unit costs times rates:

- an actor process: ``per_vector_step_s / k + per_env_step_s`` per env step (k env copies
  share one batched forward pass; measured on a whole ``apex actor`` process, so its
  priorities, weights loads, reports and insert client are in it), plus
  ``client_credit_s`` per credit question, times ``actor_shared_factor`` for the share
  ``Load.actor_core_busy`` of the time its core runs other work;
- the insert clients alone (a synthetic fleet): ``client_s_per_message`` per message plus
  ``client_credit_s`` per credit question, plus ``client_per_connection_s`` per
  connection per second;
- a shard: ``idle_cores``, plus ``per_message_s`` per insert message and ``per_credit_s``
  per credit question, plus ``per_request_s + k * per_sampled_s`` per sample request of
  k transitions (with the priority update that follows it), plus ``per_connection_s`` per
  open connection per second (heartbeats; two connections per actor process). Those
  per-operation costs are measured on a core of the shard's own, idle between operations
  (so each pays for waking it). On a core it shares with a learner, an operation finds
  its caches cold after the learner's time slice and costs ``message_shared_factor`` or
  ``request_shared_factor`` times as much (measured beside a real training loop); a
  shard whose core is busy with other work a share ``Load.core_busy`` of the time pays
  that share of the difference;
- the wire: ``wire_bytes`` per transition in, ``sample_bytes`` per sampled transition out,
  the weights once per actor process per publication.

A learner update takes a batch split evenly over the shards: one request per shard. A
client asks a shard for credit once a quarter of its limit there is in flight
(``replay.inserts.client``): a client streaming to one shard asks once per 16 messages, one of
many actors at the paper's rate once per message (see :func:`credit_per_message`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from replay.server.credit_desk import shared_window

# A shard is one process with one hot loop: plan it at most this busy, so that bursts and
# snapshots have room (the suite's shards run at 2-15% of a core here).
SHARD_BUSY_TARGET = 0.7
# Each actor process has two connections per shard: inserts (PUSH) and credit (DEALER).
CONNECTIONS_PER_PROCESS = 2
# An insert client's credit over all shards (``replay.inserts.client.InsertClient``).
CLIENT_CREDIT = 16
# The Ape-X paper: 139 env frames/s per actor with action repeat 4, so about 35 transitions
# per second; its GPU learner took 19 batches of 512 per second.
PAPER_ACTOR_RATE = 35.0
PAPER_LEARNER_UPDATES = 19.0
PAPER_BATCH = 512


@dataclass(frozen=True)
class UnitCosts:
    """What one unit of work costs, for one env's transitions (CPU seconds, bytes)."""

    env: str
    per_vector_step_s: float
    per_env_step_s: float
    client_s_per_message: float
    client_credit_s: float
    transitions_per_message: int
    wire_bytes: float
    sample_bytes: float
    weights_bytes: int
    idle_cores: float
    per_message_s: float
    per_credit_s: float
    per_request_s: float
    per_sampled_s: float
    per_connection_s: float
    message_shared_factor: float
    request_shared_factor: float
    actor_shared_factor: float
    client_shared_factor: float
    client_per_connection_s: float

    def actor_step_s(self, envs_per_process: int) -> float:
        return self.per_vector_step_s / envs_per_process + self.per_env_step_s

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Load:
    """What a run asks of its roles, per second."""

    transitions: float  # env steps (transitions) made and sent
    actor_processes: int
    envs_per_process: int
    shards: int
    updates: float  # learner updates
    batch: int  # transitions per update, split over the shards
    core_busy: float = 0.0  # share of time the shards' cores are busy with other work
    actor_core_busy: float = 0.0  # the same for the actors' cores


def _shared(factor: float, busy: float) -> float:
    """What an operation costs against a core of its own: ``factor`` (measured beside a
    learner) for the share of time ``busy`` its core runs other work."""
    return 1.0 + min(1.0, max(0.0, busy)) * (factor - 1.0)


def transitions_per_insert(costs: UnitCosts, load: Load) -> int:
    """An actor process sends once it holds ``transitions_per_message``, and a vector
    step adds one transition per env, so a message holds ``k * ceil(batch / k)`` (64
    with 64 envs)."""
    k = load.envs_per_process
    return k * math.ceil(costs.transitions_per_message / k)


def messages_per_s(costs: UnitCosts, load: Load) -> float:
    """Insert messages a second (see :func:`transitions_per_insert`)."""
    return load.transitions / transitions_per_insert(costs, load)


def credit_per_message(costs: UnitCosts, load: Load) -> float:
    """Credit questions per insert message: one per quarter of a client's limit at a
    shard, its share of the credit or of the shard's window (counted in bytes, see
    ``replay.server.credit_desk``), whichever is larger."""
    share = math.ceil(CLIENT_CREDIT / load.shards)
    message_nbytes = costs.wire_bytes * transitions_per_insert(costs, load)
    limit = max(share, shared_window(message_nbytes) // max(1, load.actor_processes))
    return 1.0 / max(1, limit // 4)


def shard_cores(costs: UnitCosts, load: Load) -> float:
    """All shards together, in cores."""
    messages = messages_per_s(costs, load)
    connections = CONNECTIONS_PER_PROCESS * load.actor_processes * load.shards
    per_message = costs.per_message_s + credit_per_message(costs, load) * costs.per_credit_s
    per_update = load.shards * costs.per_request_s + load.batch * costs.per_sampled_s
    return (
        load.shards * costs.idle_cores
        + messages * per_message * _shared(costs.message_shared_factor, load.core_busy)
        + load.updates * per_update * _shared(costs.request_shared_factor, load.core_busy)
        + connections * costs.per_connection_s
    )


def actor_cores(costs: UnitCosts, load: Load) -> float:
    """All actor processes together, in cores."""
    messages = messages_per_s(costs, load)
    return _shared(costs.actor_shared_factor, load.actor_core_busy) * (
        load.transitions * costs.actor_step_s(load.envs_per_process)
        + messages * credit_per_message(costs, load) * costs.client_credit_s
    )


def client_cores(costs: UnitCosts, load: Load) -> float:
    """Insert clients alone (no envs, no network), in cores: a synthetic fleet, whose
    clients also keep their connections alive (the same heartbeats, from the other end).
    Their cores are busy with other work ``Load.actor_core_busy`` of the time."""
    messages = messages_per_s(costs, load)
    credit = credit_per_message(costs, load)
    per_message = costs.client_s_per_message + credit * costs.client_credit_s
    connections = CONNECTIONS_PER_PROCESS * load.actor_processes * load.shards
    shared = _shared(costs.client_shared_factor, load.actor_core_busy)
    return messages * per_message * shared + connections * costs.client_per_connection_s


def sampling_limit(costs: UnitCosts, load: Load) -> float:
    """Learner updates/s at which the busiest part of the replay, a shard at
    :data:`SHARD_BUSY_TARGET`, becomes the bottleneck (with this load's inserts)."""
    without = shard_cores(costs, replace(load, updates=0.0))
    per_update = shard_cores(costs, replace(load, updates=1.0)) - without
    return max(0.0, (load.shards * SHARD_BUSY_TARGET - without) / per_update)


def shards_needed(costs: UnitCosts, load: Load) -> int:
    """The fewest shards that keep each under :data:`SHARD_BUSY_TARGET`."""
    for shards in range(1, 4097):
        if shard_cores(costs, replace(load, shards=shards)) <= (shards * SHARD_BUSY_TARGET):
            return shards
    raise ValueError("no shard count up to 4,096 carries this load")


def plan(
    costs: UnitCosts,
    actors: int,
    learner_updates: float,
    batch: int = PAPER_BATCH,
    actor_rate: float = PAPER_ACTOR_RATE,
    envs_per_process: int = 4,
    publish_period: int = 10,
) -> dict:
    """What ``actors`` Ape-X actors (env copies) at ``actor_rate`` transitions/s need, with a
    learner of ``learner_updates`` updates/s of ``batch`` that publishes its weights every
    ``publish_period`` updates to every actor process (a PUB socket sends each its copy)."""
    processes = math.ceil(actors / envs_per_process)
    load = Load(actors * actor_rate, processes, envs_per_process, 1, learner_updates, batch)
    shards = shards_needed(costs, load)
    load = replace(load, shards=shards)
    actor_cpu = actor_cores(costs, load)
    inbound = load.transitions * costs.wire_bytes
    sampled = learner_updates * batch * costs.sample_bytes
    weights = processes * learner_updates / publish_period * costs.weights_bytes
    return {
        "actors": actors,
        "actor_processes": processes,
        "transitions_per_s": load.transitions,
        "actor_cores": actor_cpu,
        # Actor processes packed onto full nodes, each core shared with others' work.
        "actor_cores_packed": actor_cores(costs, replace(load, actor_core_busy=1.0)),
        "shards": shards,
        "shard_cores": shard_cores(costs, load),
        # The same shards on cores they share with the actors or the learner.
        "shard_cores_shared": shard_cores(costs, replace(load, core_busy=1.0)),
        "sampling_limit_updates_per_s": sampling_limit(costs, load),
        "actors_to_shards_mb_per_s": inbound / 1e6,
        "shards_to_learner_mb_per_s": sampled / 1e6,
        "weights_mb_per_s": weights / 1e6,
        "learner_updates_per_s": learner_updates,
        "replay_ratio": learner_updates * batch / load.transitions,
    }


def check(predicted: float, measured: float, tolerance: float = 0.25) -> dict:
    """A prediction against a measurement: relative error and whether it is within."""
    error = (predicted - measured) / measured if measured else math.inf
    return {
        "predicted": predicted,
        "measured": measured,
        "error": error,
        "within": abs(error) <= tolerance,
    }
