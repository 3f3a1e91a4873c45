"""``apex bench compare OLD.json NEW.json``: ratios between two runs, to catch regressions.

Records are matched by (suite, case, implementation, metric). For rates (units per second)
a ratio below 1 means NEW is slower; for times (seconds) the ratio is inverted so that
below 1 still means worse.
"""

from __future__ import annotations


def _key(record: dict) -> tuple[str, str, str, str]:
    return (record["suite"], record["case"], record["implementation"], record["metric"])


def compare(old: dict, new: dict, threshold: float = 0.9) -> list[dict]:
    """One row per figure in both runs: old and new medians and NEW's speed relative to OLD."""
    before = {_key(r): r for r in old.get("records", []) if r.get("status") == "ok"}
    rows = []
    for record in new.get("records", []):
        if record.get("status") != "ok" or _key(record) not in before:
            continue
        previous = before[_key(record)]
        if previous["median"] <= 0 or record["median"] <= 0:
            continue
        lower_is_better = record["unit"] == "s"
        ratio = (
            previous["median"] / record["median"]
            if lower_is_better
            else record["median"] / previous["median"]
        )
        rows.append(
            {
                "suite": record["suite"], "case": record["case"],
                "implementation": record["implementation"], "metric": record["metric"],
                "unit": record["unit"], "old": previous["median"], "new": record["median"],
                "speed": ratio, "regression": ratio < threshold,
            }
        )  # fmt: skip
    return rows


def markdown(rows: list[dict], threshold: float) -> str:
    lines = [
        "| suite | case | implementation | metric | old | new | new/old speed |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        flag = " ⚠" if row["regression"] else ""
        lines.append(
            f"| {row['suite']} | {row['case']} | {row['implementation']} | {row['metric']} "
            f"| {row['old']:.4g} {row['unit']} | {row['new']:.4g} {row['unit']} "
            f"| {row['speed']:.2f}×{flag} |"
        )
    regressions = sum(row["regression"] for row in rows)
    lines += ["", f"{len(rows)} figures compared; {regressions} below {threshold:.2f}× (⚠)."]
    return "\n".join(lines) + "\n"
