"""``apex bench model``: unit costs measured here, the cost model checked against every
measured run given, and what 360, 1,000 and 4,000 Ape-X actors would need.

The checks predict each role's CPU from the rates a run measured (transitions in, insert
messages, learner updates and samples) and the share of its cores that other roles kept
busy, and compare it with the CPU the run measured for that role: ``bench system`` runs
(actor processes and shards) and ``bench fleet`` runs (the fleet's insert clients and the
shards). A check is met within 25%. This VM's speed drifts by up to 2x over hours, so the
runs checked should be measured in the same sitting as the unit costs.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.report import ok_record
from bench.system import cost_model, cost_units
from bench.system.cost_model import Load, UnitCosts
from launch.config import resolve

SUITE = "model"
CLUSTER_SIZES = (360, 1_000, 4_000)
TOLERANCE = 0.25
COST_UNITS = {
    "per_vector_step_s": "s",
    "per_env_step_s": "s",
    "client_s_per_message": "s",
    "client_credit_s": "s",
    "per_credit_s": "s",
    "client_per_connection_s": "s",
    "message_shared_factor": "x",
    "request_shared_factor": "x",
    "actor_shared_factor": "x",
    "client_shared_factor": "x",
    "wire_bytes": "bytes/transition",
    "sample_bytes": "bytes/transition",
    "weights_bytes": "bytes",
    "idle_cores": "cores",
    "per_message_s": "s",
    "per_request_s": "s",
    "per_sampled_s": "s",
    "per_connection_s": "s",
}
PLAN_UNITS = {
    "actor_processes": "processes",
    "actor_cores": "cores",
    "actor_cores_packed": "cores",
    "shards": "shards",
    "shard_cores": "cores",
    "sampling_limit_updates_per_s": "updates/s",
    "actors_to_shards_mb_per_s": "MB/s",
    "shards_to_learner_mb_per_s": "MB/s",
    "weights_mb_per_s": "MB/s",
    "replay_ratio": "sampled/inserted",
    "shard_cores_shared": "cores",
}


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
        beside_shard = (
            figures["cpu_learner"]
            + figures["cpu_actor"]
            + figures["cpu_shard"] * (shards - 1) / shards
        )
        processes = params["actors"]
        beside_actor = (
            figures["cpu_learner"]
            + figures["cpu_shard"]
            + figures["cpu_actor"] * (processes - 1) / processes
        )
        load = Load(
            figures["transitions_in"],
            params["actors"],
            params["envs_per_actor"],
            shards,
            figures["updates"],
            round(figures["samples"] / figures["updates"]),
            _busy(beside_shard, cores),
            _busy(beside_actor, cores),
        )
        predictions = {
            "shard": cost_model.shard_cores(costs, load),
            "actor": cost_model.actor_cores(costs, load),
        }
        for role, predicted in predictions.items():
            measured = figures[f"cpu_{role}"]
            checks.append(
                {
                    "source": source,
                    "kind": "system",
                    "case": case,
                    "role": role,
                    **cost_model.check(predicted, measured, TOLERANCE),
                }
            )
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
        if "learner_updates_per_s" not in figures:  # not measured: its sample load unknown
            continue
        messages, shards = figures["messages_per_s"], params["shards"]
        others = figures["fleet_cpu_cores"] + figures["shard_cpu_cores"] * (shards - 1) / shards
        fleet_cores = max(1, cores - 1)
        load = Load(
            messages * costs.transitions_per_message,
            params["actors"],
            1,
            shards,
            figures["learner_updates_per_s"],
            _learner_batch(costs.env),
            _busy(others, fleet_cores),
            _busy(figures["shard_cpu_cores"], fleet_cores),
        )
        shard = cost_model.shard_cores(costs, load)
        # The fleet runs niced on the shards' cores. When both want more than those cores
        # have, the shards take what they need and the fleet sends with what is left, in
        # bursts (the same messages for fewer wake-ups) rather than falling behind.
        clients = min(cost_model.client_cores(costs, load), max(0.0, fleet_cores - shard))
        for role, predicted, measured in (
            ("shard", shard, figures["shard_cpu_cores"]),
            ("insert clients", clients, figures["fleet_cpu_cores"]),
        ):
            checks.append(
                {
                    "source": source,
                    "kind": "fleet",
                    "case": case,
                    "role": role,
                    **cost_model.check(predicted, measured, TOLERANCE),
                }
            )
    return checks


def scaling_checks(paths: Sequence[Path], seconds: float, progress: Callable[[str], None]) -> dict:
    """Each scaling record's points against the scaling model, its task's unit costs
    measured once (``bench.scaling.scaling_model``), and the knee it predicts."""
    from bench.scaling import scaling_model, scaling_units
    from bench.scaling.scaling_tasks import TASKS

    configs = {
        str(path): json.loads(path.read_text())["suites"]["scaling"]["config"] for path in paths
    }
    units, windows, checks, knees = {}, {}, [], {}
    for source, config in configs.items():
        name = config["task"]["name"]
        if name not in units:
            counts = {
                point["actors"]
                for config in configs.values()
                if config["task"]["name"] == name
                for point in config["points"]
            }
            measured, windows[name] = scaling_units.measure_units(
                TASKS[name], seconds, progress, counts
            )
            units[name] = measured
            knees[name] = scaling_model.knee(measured)
        checks += scaling_model.check_points(units[name], config, source)
    met = sum(check["within"] for check in checks)
    return {
        "units": {name: u.to_dict() for name, u in units.items()},
        "calibration": windows,
        "checks": checks,
        "checks_within": f"{met}/{len(checks)}",
        "knees": knees,
    }


def pong_cluster(costs: UnitCosts) -> list[dict]:
    """Nodes of 16, 32 and 64 cores of Pong actors (the preset's envs per actor, cores
    shared as a packed node's are) until a CUDA learner binds, at each committed rate."""
    from bench.scaling import scaling_model

    config = resolve({"env": "Pong"})
    step_s = costs.actor_step_s(config.actor.envs_per_actor) * costs.actor_shared_factor
    ratio = config.replay.samples_per_insert or scaling_model.PAPER_REPLAY_RATIO
    rows = []
    for source, updates in scaling_model.CUDA_LEARNER_RATES.items():
        for row in scaling_model.cluster_table(step_s, updates, config.learner.batch_size, ratio):
            rows.append(
                {
                    "learner": source,
                    "learner_updates_per_s": updates,
                    "replay_ratio": ratio,
                    "actor_step_s": step_s,
                    **row,
                }
            )
    return rows


def run(
    envs: Sequence[str] = ("CartPole-v1", "Pong"),
    seconds: float = 3.0,
    measured: Sequence[Path] = (),
    learner_rates: Sequence[float] = (cost_model.PAPER_LEARNER_UPDATES,),
    progress: Callable[[str], None] = print,
    repeats: int = 3,
    scaling_records: Sequence[Path] = (),
    scaling_seconds: float = 20.0,
) -> dict:
    """Unit costs are the medians of ``repeats`` measurements (this VM's noise moves one
    window by 20-40%). ``scaling_records`` (``apex bench scaling`` records) are checked
    against the scaling model (:func:`scaling_checks`)."""
    records, checks, plans, unit_costs, all_costs = [], [], [], {}, {}
    documents = {str(path): cost_units.load_measured(path) for path in measured}
    rounds = [cost_units.measure(list(envs), seconds, progress) for _ in range(repeats)]
    for env in envs:
        samples = {name: [measured[env][name] for measured in rounds] for name in COST_UNITS}
        costs = UnitCosts(
            **{**rounds[0][env], **{n: statistics.median(v) for n, v in samples.items()}}
        )
        unit_costs[env] = costs.to_dict()
        for name, unit in COST_UNITS.items():
            records.append(
                ok_record(SUITE, f"{env}-units", "apex", name, unit, samples[name], {"env": env})
            )
        for source, document in documents.items():
            checks += system_checks(costs, document, source)
            checks += fleet_checks(costs, document, source)
        all_costs[env] = costs
    for updates in learner_rates if "Pong" in all_costs else ():  # the paper's agent: Atari
        for actors in CLUSTER_SIZES:
            row = cost_model.plan(all_costs["Pong"], actors, updates, _learner_batch("Pong"))
            plans.append({"env": "Pong", **row})
            params = {"env": "Pong", "actors": actors, "learner_updates_per_s": updates}
            case = f"Pong-{actors}-actors-{updates:g}-updates"
            for name, unit in PLAN_UNITS.items():
                records.append(ok_record(SUITE, case, "model", name, unit, [row[name]], params))
    for check in checks:
        params = {
            "source": check["source"],
            "role": check["role"],
            "error": check["error"],
            "within": check["within"],
        }
        for kind in ("predicted", "measured"):
            records.append(
                ok_record(
                    SUITE,
                    f"check-{check['case']}-{check['role']}",
                    kind,
                    "cpu",
                    "cores",
                    [check[kind]],
                    params,
                )
            )
    scaling = scaling_checks(scaling_records, scaling_seconds, progress) if scaling_records else {}
    for check in scaling.get("checks", []):
        params = {key: check[key] for key in ("source", "bound_by", "error", "within")}
        for kind in ("predicted", "measured"):
            case = f"scaling-{check['actors']}-actors"
            figure = [check[kind]]
            records.append(
                ok_record(SUITE, case, kind, "env_steps_per_s", "steps/s", figure, params)
            )
    if "Pong" in all_costs:
        scaling["pong_cluster"] = pong_cluster(all_costs["Pong"])
        for row in scaling["pong_cluster"]:
            case = (
                f"pong-nodes-of-{row['node_cores']}-cores-{row['learner_updates_per_s']:g}-updates"
            )
            params = {key: row[key] for key in ("learner", "node_cores", "replay_ratio")}
            for name, unit in (
                ("env_steps_per_s_per_node", "steps/s"),
                ("nodes_until_learner_binds", "nodes"),
                ("speedup_there", "x one node"),
            ):
                records.append(ok_record(SUITE, case, "model", name, unit, [row[name]], params))
    met = sum(check["within"] for check in checks)
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
            "plans": plans,
            "shard_busy_target": cost_model.SHARD_BUSY_TARGET,
            "scaling": scaling,
        },
    }
