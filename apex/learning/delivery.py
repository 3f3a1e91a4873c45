"""What reached the replay, and what did not: the account a run gives at its end.

Each actor's heartbeats tell the learner how many transitions it handed to its replay
client, and how many of those its shards have not confirmed yet (it keeps them and sends
them again if a shard loses them, see ``replay.server.lanes``); each shard's INFO tells how many
it holds from every sender. What a live actor has not had confirmed is in transit; what
it sent beyond that and no shard holds was lost by a shard that came back from an older
snapshot; an actor gone silent lost whatever its process held. An actor's last word
comes after it waited for its confirmations: what is missing then is lost. Shard outages
are as the learner's sampler saw them.

An actor that gave a silent shard up sent what it kept for it to the others; if that shard
comes back holding some of it, the shards hold more from the actor than it sent: those
are counted stored twice. Frame batches cannot move, so an actor counts them abandoned
(they are among the lost).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from apex.channels import HEARTBEAT_S, ActorStatus, EpisodeCollector, fault_totals
from replay.errors import ReplayError

if TYPE_CHECKING:
    from apex.learning.staging import BatchSource

logger = logging.getLogger(__name__)

# An actor not heard for this long counts as gone.
SILENT_AFTER_S = 5 * HEARTBEAT_S
# How long the end-of-run account waits for every shard's fresh INFO.
FINAL_INFO_TIMEOUT_S = 2.0


def final_account(source: BatchSource, episodes: EpisodeCollector) -> tuple[dict, int | None]:
    """The learner's account at the end of a run: what the actors sent against what the
    shards hold (:func:`delivery_report`), and the transitions the shards took in all
    (None unless every shard answered)."""
    episodes.drain()  # the newest heartbeats first
    asked_at = time.monotonic()
    try:
        states = source.refresh_infos(FINAL_INFO_TIMEOUT_S)
    except ReplayError as exc:
        logger.warning("no shard counters for the delivery account: %s", exc)
        states = source.shard_states()
    # Only counters from after the question count: a shard that did not answer is
    # unknown (None), not as it was a second ago. No states at all (the source never
    # started): nothing is known.
    fresh = [s["info"] if s["info_asked_at"] >= asked_at else None for s in states] or [None]
    report = delivery_report(episodes.actors, fresh, states, time.monotonic())
    logger.info("delivery: %s", describe(report))
    added = None if None in fresh else sum(info["transitions_added"] for info in fresh)
    return report, added


def delivery_report(
    actors: dict[int, ActorStatus],
    shard_infos: list[dict | None],
    shard_states: list[dict],
    now: float,
) -> dict:
    """A JSON-ready account. ``now`` is a ``time.monotonic()`` reading."""
    received: dict[int, int] = {}
    for info in shard_infos:
        for sender, stats in (info or {}).get("senders", {}).items():
            received[int(sender)] = received.get(int(sender), 0) + int(stats["transitions"])
    shards_answered = all(info is not None for info in shard_infos)
    per_actor = {}
    lost = in_transit = stored_twice = 0
    for index, status in sorted(actors.items()):
        silent_for = now - status.last_heard
        gone = silent_for > SILENT_AFTER_S and not status.final  # stopped is not gone
        got = received.get(index, 0)
        missing = max(0, status.transitions_sent - got) if shards_answered else None
        # Only a last word is a count no shard can be ahead of, and only rerouting stores
        # twice (shards restored in a requeued job also hold what earlier lives sent).
        twice = shards_answered and status.final and status.rerouted
        surplus = max(0, got - status.transitions_sent) if twice else 0
        stored_twice += surplus
        held = 0
        if missing is not None:
            held = 0 if gone or status.final else min(missing, status.unconfirmed)
            lost += missing - held
            in_transit += held
        per_actor[str(index)] = {
            "transitions_sent": status.transitions_sent,
            "transitions_received": got,
            "missing": missing,
            "in_transit": held if missing is not None else None,
            "gone": gone,
            "stopped": status.final,
            "resent_batches": status.resent,
            "rerouted_batches": status.rerouted,
            "abandoned": status.abandoned,
            "stored_twice": surplus,
            "silent_for_s": round(silent_for, 2),
            "longest_silence_s": round(max(status.longest_silence_s, silent_for), 2),
        }
    faults = fault_totals(actors.values())
    return {
        "actors_heard": len(actors),
        # Env copies' faults (apex.envs.guard): the steps they cost were never sent.
        **faults,
        "actors_gone": sorted(int(i) for i, a in per_actor.items() if a["gone"]),
        "transitions_received": sum(received.values()),
        "transitions_lost": lost if shards_answered else None,
        "transitions_in_transit": in_transit if shards_answered else None,
        "shards_answering": sum(info is not None for info in shard_infos),
        # Batch messages a shard dropped as already held, and lane numbers it found
        # lost when it came back (see replay.server.lanes).
        "resent_batches": sum(a.resent for a in actors.values()),
        # Batches moved off shards given up, frame transitions that could not move, and
        # what a given-up shard that came back holds twice (see the module's doc).
        "rerouted_batches": sum(a.rerouted for a in actors.values()),
        "transitions_abandoned": sum(a.abandoned for a in actors.values()),
        "transitions_stored_twice": stored_twice if shards_answered else None,
        "duplicates_dropped": sum((i or {}).get("duplicates_dropped", 0) for i in shard_infos),
        "batches_lost_at_shard_restart": sum(
            (i or {}).get("lost_at_restart", 0) for i in shard_infos
        ),
        # A failed snapshot keeps the one before; a full disk shows here.
        "snapshots_failed": sum((i or {}).get("snapshots_failed", 0) for i in shard_infos),
        "shard_outages": [
            {"shard": s["index"], "outages": s["outages"], "down_s": round(s["down_s"], 2)}
            for s in shard_states
            if s.get("outages")
        ],
        "actors": per_actor,
    }


def lost_by_actor(delivery: dict) -> dict[str, dict] | None:
    """Each actor that :func:`delivery_report`'s account says lost transitions, with what
    it knows of it (missing, in transit, gone or stopped, its longest silence), so that a
    loss in a record says where it happened; None where none lost any."""
    keys = ("missing", "in_transit", "gone", "stopped", "longest_silence_s")
    losing = {
        index: {key: actor.get(key) for key in keys}
        for index, actor in (delivery.get("actors") or {}).items()
        if (actor.get("missing") or 0) > (actor.get("in_transit") or 0)
    }
    return losing or None


def describe(report: dict) -> str:
    """One line for a person."""
    parts = [f"{report['actors_heard']} actors heard"]
    for index, actor in report["actors"].items():
        if actor["gone"]:
            parts.append(
                f"actor {index} gone (silent for the last {actor['silent_for_s']:.1f} s, "
                f"{actor['missing'] if actor['missing'] is not None else '?'} transitions lost)"
            )
        elif actor["longest_silence_s"] > SILENT_AFTER_S:
            parts.append(f"actor {index} was silent for {actor['longest_silence_s']:.1f} s")
    if report["transitions_lost"] is None:
        parts.append("shards did not all answer: losses unknown")
    else:
        parts.append(f"{report['transitions_lost']} transitions lost")
        if report["transitions_in_transit"]:
            parts.append(f"{report['transitions_in_transit']} still in transit")
    for outage in report["shard_outages"]:
        parts.append(
            f"shard {outage['shard']} down {outage['outages']}× ({outage['down_s']:.1f} s)"
        )
    return "; ".join(parts)
