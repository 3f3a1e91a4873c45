"""Benchmark documents: the JSON written by every run and its markdown rendering.

JSON schema ``apex-bench/1``::

    {
      "schema": "apex-bench/1",
      "created_utc": "2026-11-22T03:00:00Z",
      "command": "apex bench replay --json out.json",
      "machine": {"cpu", "cores", "memory_bytes", "gpu", "platform", "python"},
      "packages": {"numpy": "2.4.6", ..., "torchrl": null},
      "git": {"commit": "<sha>", "dirty": false},
      "suites": {"<suite>": {"config": {...}}},
      "records": [
        {"suite", "case", "implementation", "status": "ok", "metric", "unit",
         "median", "min", "max", "repeats", "per_repeat_s", "params": {...}},
        {"suite", "case", "implementation", "status": "unavailable", "reason", "params"}
      ],
      "ratios": [{"suite", "case", "metric", "numerator", "denominator", "ratio"}]
    }

Rates are per second of wall-clock time; ``median``, ``min`` and ``max`` are over
``repeats`` timed repeats that follow an untimed warm-up.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.machine import git_commit, machine_info, package_versions

SCHEMA = "apex-bench/1"
REQUIRED_RECORD_KEYS = ("suite", "case", "implementation", "status", "params")
REQUIRED_OK_KEYS = ("metric", "unit", "median", "min", "max", "repeats")


def ok_record(
    suite: str,
    case: str,
    implementation: str,
    metric: str,
    unit: str,
    values: list[float],
    params: dict,
) -> dict:
    """A measured record: the median, min and max of ``values`` (one per timed repeat)."""
    values = [float(v) for v in values]
    return {
        "suite": suite,
        "case": case,
        "implementation": implementation,
        "status": "ok",
        "metric": metric,
        "unit": unit,
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "repeats": len(values),
        "params": params,
    }


def unavailable_record(
    suite: str, case: str, implementation: str, reason: str, params: dict | None = None
) -> dict:
    """A case that could not run here (a missing extra, peer or cluster), and why."""
    return {
        "suite": suite,
        "case": case,
        "implementation": implementation,
        "status": "unavailable",
        "reason": reason,
        "params": params or {},
    }


def missing_env(name: str) -> str | None:
    """Why environment ``name`` cannot be made here (a missing extra, with its install
    hint), or None when it can."""
    from apex.algorithms.registry import check_env
    from apex.envs.families import EnvUnavailable

    try:
        check_env(name)
    except EnvUnavailable as exc:
        return str(exc)
    return None


def new_document(repo_root: Path) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": machine_info(),
        "packages": package_versions(),
        "git": git_commit(repo_root),
        "suites": {},
        "records": [],
        "ratios": [],
    }


def add_suite(document: dict, suite: str, result: dict) -> None:
    document["suites"][suite] = {"config": result["config"]}
    document["records"].extend(result["records"])
    document["ratios"].extend(result["ratios"])


def validate(document: dict) -> list[str]:
    """Problems with a document's shape and sanity (positive rates, ratios); empty if none."""
    problems = []
    if document.get("schema") != SCHEMA:
        problems.append(f"schema is {document.get('schema')!r}, expected {SCHEMA!r}")
    for key in ("machine", "packages", "git", "records", "ratios", "suites"):
        if key not in document:
            problems.append(f"missing top-level key {key!r}")
    for index, record in enumerate(document.get("records", [])):
        missing = [k for k in REQUIRED_RECORD_KEYS if k not in record]
        if record.get("status") == "ok":
            missing += [k for k in REQUIRED_OK_KEYS if k not in record]
            # Rates must be positive; returns may have any sign; other figures (seconds,
            # counts) only non-negative.
            unit = str(record.get("unit"))
            floor_ok = record["min"] > 0 if "/s" in unit else unit == "return" or record["min"] >= 0
            if not missing and not (
                floor_ok and record["min"] <= record["median"] <= record["max"]
            ):
                problems.append(f"record {index}: figures not in range and ordered: {record}")
        elif record.get("status") == "unavailable":
            missing += [] if "reason" in record else ["reason"]
        else:
            problems.append(f"record {index}: unknown status {record.get('status')!r}")
        if missing:
            problems.append(f"record {index}: missing {missing}")
    for index, ratio in enumerate(document.get("ratios", [])):
        if not (isinstance(ratio.get("ratio"), float) and ratio["ratio"] > 0):
            problems.append(f"ratio {index}: not a positive number: {ratio}")
    return problems


def replace_suite(document: dict, suite: str, result: dict, json_path: Path | None) -> None:
    """Makes ``result`` the document's only suite and rewrites the JSON at ``json_path``
    (if given): a record rewritten after every run of a long sitting."""
    document["suites"], document["records"], document["ratios"] = {}, [], []
    add_suite(document, suite, result)
    if json_path:
        write_json(document, json_path)


def write_json(document: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n")
    temporary.replace(path)


def _format_rate(record: dict | None) -> str:
    if record is None:
        return "—"
    if record["status"] != "ok":
        return "unavailable"
    text = f"{_si(record['median'])} ({_si(record['min'])}–{_si(record['max'])})"
    if record.get("unsolved"):
        return f"not solved ({record['unsolved']} of {record['repeats']} seeds): ≥ {text}"
    return text


def _si(value: float) -> str:
    for threshold, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if value >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"


def markdown(document: dict) -> str:
    """One table per suite: a row per (case, metric), a column per implementation, then
    the ratios; unavailable implementations are listed with their reasons."""
    lines = [
        f"Measured {document['created_utc']} on {document['machine']['cpu']} "
        f"({document['machine']['cores']} cores), commit "
        f"{(document['git'].get('commit') or 'unknown')[:10]}"
        f"{' (dirty)' if document['git'].get('dirty') else ''}.",
        "",
        f"Command: `{document['command']}`",
        "",
    ]
    for suite in document["suites"]:
        records = [r for r in document["records"] if r["suite"] == suite]
        implementations = list(dict.fromkeys(r["implementation"] for r in records))
        ratio_rows = [r for r in document["ratios"] if r["suite"] == suite]
        ratio_names = list(
            dict.fromkeys(f"{r['numerator']}/{r['denominator']}" for r in ratio_rows)
        )
        header = ["case", "metric", "unit", *implementations, *ratio_names]
        lines += [f"### {suite}", "", "| " + " | ".join(header) + " |"]
        lines.append("|" + "---|" * len(header))
        keys = list(
            dict.fromkeys(
                (r["case"], r["metric"], r["unit"]) for r in records if r["status"] == "ok"
            )
        )
        for case, metric, unit in keys:
            cells = [case, metric, unit]
            for implementation in implementations:
                match = [
                    r
                    for r in records
                    if r["case"] == case
                    and r["implementation"] == implementation
                    and (r["status"] != "ok" or r["metric"] == metric)
                ]
                cells.append(_format_rate(match[0] if match else None))
            for name in ratio_names:
                found = [
                    r["ratio"]
                    for r in ratio_rows
                    if r["case"] == case
                    and r["metric"] == metric
                    and f"{r['numerator']}/{r['denominator']}" == name
                ]
                cells.append(f"{found[0]:.2f}×" if found else "—")
            lines.append("| " + " | ".join(cells) + " |")
        bottlenecks = {
            r["case"]: r["params"]
            for r in records
            if r["status"] == "ok" and "bottleneck" in r["params"]
        }
        if bottlenecks:
            lines.append("")
        for case, params in bottlenecks.items():
            cpu = ", ".join(
                f"{role} {cores:.2f}" for role, cores in params.get("cpu_cores_by_role", {}).items()
            )
            lines.append(
                f"- {case}: bottleneck **{params['bottleneck']}** (CPU cores by role: {cpu})"
            )
        reasons = {
            (r["implementation"], r["reason"]) for r in records if r["status"] == "unavailable"
        }
        if reasons:
            lines.append("")
            lines += [f"- {name} unavailable: {reason}" for name, reason in sorted(reasons)]
        lines.append("")
    lines.append("Cells: median (min–max) of the timed repeats.")
    return "\n".join(lines) + "\n"
