"""``apex bench compare OLD.json NEW.json``: ratios between two runs, to catch regressions.

Records are matched by (suite, case, implementation, metric). For rates (units per second)
a ratio below 1 means NEW is slower; for times (seconds, or milliseconds an update) the
ratio is inverted so that below 1 still means worse.

A learning figure (``bench.learning.learn_suite``: an IQM with a 95% interval over seeds) is a
regression only when NEW's interval lies wholly on the worse side of OLD's: the ratio of
two IQMs over ten seeds moves by more than any threshold from chance alone.
"""

from __future__ import annotations

from bench.learning.learning_stats import wholly_worse

# Units of time (a figure where less is better): seconds, or a time per item.
TIME_UNITS = ("s", "ms", "us", "µs", "ns")


def _is_time(unit: str) -> bool:
    return unit.split("/", 1)[0] in TIME_UNITS


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
        intervals = all("ci_low" in r for r in (record, previous))
        lower_is_better = not record.get("higher_is_better", not _is_time(record["unit"]))
        old_value, new_value = (
            (previous["iqm"], record["iqm"])
            if intervals
            else (previous["median"], record["median"])
        )
        positive = old_value > 0 and new_value > 0
        if not (positive or intervals):
            continue
        ratio = None  # returns may be negative: only their intervals compare
        if positive:
            ratio = old_value / new_value if lower_is_better else new_value / old_value
        regression = ratio is not None and ratio < threshold
        if intervals:
            regression = wholly_worse(
                (record["ci_low"], record["ci_high"]),
                (previous["ci_low"], previous["ci_high"]),
                higher_is_better=not lower_is_better,
            )
        rows.append(
            {
                "suite": record["suite"],
                "case": record["case"],
                "implementation": record["implementation"],
                "metric": record["metric"],
                "unit": record["unit"],
                "old": old_value,
                "new": new_value,
                "speed": ratio,
                "regression": regression,
                "intervals": intervals,
            }
        )
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
            f"| {'—' if row['speed'] is None else format(row['speed'], '.2f') + '×'}{flag} |"
        )
    regressions = sum(row["regression"] for row in rows)
    lines += [
        "",
        f"{len(rows)} figures compared; {regressions} regressions (⚠): below "
        f"{threshold:.2f}×, or for learning figures a 95% interval wholly worse.",
    ]
    return "\n".join(lines) + "\n"
