"""``apex bench model``: unit costs measured here, the cost model checked against every
measured run given, and what 360, 1,000 and 4,000 Ape-X actors would need.

The checks predict each role's CPU from the rates a run measured (transitions in, insert
messages, learner updates and samples) and compare it with the CPU the run measured for
that role: ``bench system`` runs (actor processes and shards) and ``bench fleet`` runs
(the fleet's insert clients and the shards). A check is met within 25%.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import cost_model, cost_units
from bench.cost_model import Load, UnitCosts
from bench.report import ok_record
from launch.config import resolve

SUITE = "model"
CLUSTER_SIZES = (360, 1_000, 4_000)
TOLERANCE = 0.25
# The runs that calibrate how much more a role costs inside a whole run on this 2-core
# machine than alone (cache, scheduling), per kind of run; every other run checks it.
REFERENCES = {"system": "actors1-shards1", "fleet": "CartPole-v1-64x4"}
COST_UNITS = {
    "per_vector_step_s": "s", "per_env_step_s": "s", "client_s_per_message": "s",
    "client_credit_s": "s", "per_credit_s": "s", "message_wake_s": "s", "request_wake_s": "s",
    "client_per_connection_s": "s",
    "wire_bytes": "bytes/transition", "sample_bytes": "bytes/transition",
    "weights_bytes": "bytes", "idle_cores": "cores", "per_message_s": "s",
    "per_request_s": "s", "per_sampled_s": "s", "per_connection_s": "s",
}  # fmt: skip
PLAN_UNITS = {
    "actor_processes": "processes", "actor_cores": "cores", "shards": "shards",
    "shard_cores": "cores", "sampling_limit_updates_per_s": "updates/s",
    "actors_to_shards_mb_per_s": "MB/s", "shards_to_learner_mb_per_s": "MB/s",
    "weights_mb_per_s": "MB/s", "replay_ratio": "sampled/inserted",
    "shard_cores_shared": "cores",
}  # fmt: skip


def _by_case(records: list[dict], suite: str) -> dict[str, dict]:
    cases: dict[str, dict] = {}
    for record in records:
        if record["suite"] == suite and record["status"] == "ok":
            case = cases.setdefault(record["case"], {"params": record["params"]})
            case[record["metric"]] = record["median"]
    return cases


def _learner_batch(env: str) -> int:
    return resolve({"env": env}).learner.batch_size


def _busy(others: float, cores: float) -> float:
    """Share of time a core is busy with other processes' work, spread evenly."""
    return min(1.0, others / max(1.0, cores))


def system_checks(costs: UnitCosts, document: dict, source: str) -> list[dict]:
    """Actor and shard CPU of ``bench system`` runs (those that name their env copies).
    Every role shares the machine's cores."""
    checks, cores = [], document["machine"]["cores"]
    for case, figures in _by_case(document["records"], "system").items():
        params = figures["params"]
        if params.get("env") != costs.env or not params.get("envs_per_actor"):
            continue
        if not figures.get("updates") or "cpu_shard" not in figures:
            continue
        shards = params["shards"]
        others = (figures["cpu_learner"] + figures["cpu_actor"]
                  + figures["cpu_shard"] * (shards - 1) / shards)  # fmt: skip
        load = Load(figures["transitions_in"], params["actors"], params["envs_per_actor"], shards,
                    figures["updates"], round(figures["samples"] / figures["updates"]),
                    _busy(others, cores))  # fmt: skip
        predictions = {"shard": cost_model.shard_cores(costs, load),
                       "actor": cost_model.actor_cores(costs, load)}  # fmt: skip
        for role, predicted in predictions.items():
            measured = figures[f"cpu_{role}"]
            checks.append({"source": source, "kind": "system", "case": case, "role": role,
                           **cost_model.check(predicted, measured, TOLERANCE)})  # fmt: skip
    return checks


def fleet_checks(costs: UnitCosts, document: dict, source: str) -> list[dict]:
    """Shard and insert-client CPU of ``bench fleet`` runs: the learner has a core of its
    own, the shards and the fleet share the others."""
    if cost_units.ENVS[costs.env]["kind"] == "atari-frames":
        return []  # a fleet sends whole transitions; these unit costs are the frame path's
    checks, cores = [], document["machine"]["cores"]
    for case, figures in _by_case(document["records"], "fleet").items():
        params = figures["params"]
        if params.get("env") != costs.env or not figures.get("shard_cpu_cores"):
            continue
        messages, shards = figures["messages_per_s"], params["shards"]
        others = figures["fleet_cpu_cores"] + figures["shard_cpu_cores"] * (shards - 1) / shards
        load = Load(messages * costs.transitions_per_message, params["actors"], 1, shards,
                    figures["learner_updates_per_s"], _learner_batch(costs.env),
                    _busy(others, max(1, cores - 1)))  # fmt: skip
        clients = cost_model.client_cores(costs, load)
        for role, predicted, measured in (
            ("shard", cost_model.shard_cores(costs, load), figures["shard_cpu_cores"]),
            ("insert clients", clients, figures["fleet_cpu_cores"]),
        ):
            checks.append({"source": source, "kind": "fleet", "case": case, "role": role,
                           **cost_model.check(predicted, measured, TOLERANCE)})  # fmt: skip
    return checks


def calibrate(checks: list[dict]) -> dict[str, float]:
    """Per role, measured / predicted at its reference run (:data:`REFERENCES`, the first
    found); sets every check's ``calibrated_error`` and ``reference``."""
    factors = {}
    for check in checks:
        key = f"{check['kind']} {check['role']}"
        if key not in factors and check["case"] == REFERENCES[check["kind"]]:
            factors[key] = check["measured"] / check["predicted"]
            check["reference"] = True
    for check in checks:
        check.setdefault("reference", False)
        calibrated = check["predicted"] * factors.get(f"{check['kind']} {check['role']}", 1.0)
        check["calibrated_error"] = (calibrated - check["measured"]) / check["measured"]
    return factors


def run(
    envs: Sequence[str] = ("CartPole-v1", "Pong"),
    seconds: float = 3.0,
    measured: Sequence[Path] = (),
    learner_rates: Sequence[float] = (cost_model.PAPER_LEARNER_UPDATES,),
    progress: Callable[[str], None] = print,
    repeats: int = 3,
) -> dict:
    """Unit costs are the medians of ``repeats`` measurements (this VM's noise moves one
    window by 20-40%)."""
    records, checks, plans, unit_costs, all_costs = [], [], [], {}, {}
    documents = {str(path): cost_units.load_measured(path) for path in measured}
    rounds = [cost_units.measure(list(envs), seconds, progress) for _ in range(repeats)]
    for env in envs:
        samples = {name: [measured[env][name] for measured in rounds] for name in COST_UNITS}
        costs = UnitCosts(**{**rounds[0][env], **{n: statistics.median(v)
                                                  for n, v in samples.items()}})  # fmt: skip
        unit_costs[env] = costs.to_dict()
        for name, unit in COST_UNITS.items():
            records.append(ok_record(SUITE, f"{env}-units", "apex", name, unit, samples[name],
                                     {"env": env}))  # fmt: skip
        for source, document in documents.items():
            checks += system_checks(costs, document, source)
            checks += fleet_checks(costs, document, source)
        all_costs[env] = costs
    factors = calibrate(checks)
    shared = factors.get("system shard", 1.0)
    for updates in learner_rates if "Pong" in all_costs else ():  # the paper's agent: Atari
        for actors in CLUSTER_SIZES:
            row = cost_model.plan(all_costs["Pong"], actors, updates, _learner_batch("Pong"))
            # Shards on cores they share with actors, as in the runs here: the factor the
            # system runs measured.
            row["shard_cores_shared"] = row["shard_cores"] * shared
            plans.append({"env": "Pong", **row})
            params = {"env": "Pong", "actors": actors, "learner_updates_per_s": updates}
            case = f"Pong-{actors}-actors-{updates:g}-updates"
            for name, unit in PLAN_UNITS.items():
                records.append(ok_record(SUITE, case, "model", name, unit, [row[name]],
                                         params))  # fmt: skip
    for check in checks:
        params = {"source": check["source"], "role": check["role"], "error": check["error"],
                  "within": check["within"], "calibrated_error": check["calibrated_error"],
                  "reference": check["reference"]}  # fmt: skip
        for kind in ("predicted", "measured"):
            records.append(ok_record(SUITE, f"check-{check['case']}-{check['role']}", kind,
                                     "cpu", "cores", [check[kind]], params))  # fmt: skip
    met = sum(check["within"] for check in checks)
    others = [check for check in checks if not check["reference"]]
    calibrated = sum(abs(check["calibrated_error"]) <= TOLERANCE for check in others)
    return {
        "records": records,
        "ratios": [],
        "config": {
            "envs": list(envs),
            "seconds": seconds,
            "repeats": repeats,
            "measured": list(documents),
            "tolerance": TOLERANCE,
            "unit_costs": unit_costs,
            "checks": checks,
            "checks_within": f"{met}/{len(checks)}",
            "colocation_factors": factors,
            "calibrated_within": f"{calibrated}/{len(others)}",
            "plans": plans,
            "shard_busy_target": cost_model.SHARD_BUSY_TARGET,
        },
    }
