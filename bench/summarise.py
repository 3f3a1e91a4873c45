"""Summarises a benchmark record too large to commit whole (over about 500 KB): each long
list inside its runs (evaluation curves, per-step series) gives way to its length, and
the record says what was dropped. The suite's own records (``records``, ``ratios``) and
every scalar stay, so the figures the docs cite still check against it
(``bench.doc_figures``).

``python -m bench.summarise RECORD.json [--keep N]`` rewrites the file in place.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Lists up to this long are kept (a run's few confirmations, a sweep's lags).
KEPT_ITEMS = 32
# What is never summarised: the suite's figures and where they come from.
KEPT_KEYS = ("schema", "created_utc", "command", "machine", "packages", "git", "records", "ratios")


def _summarised(value: object, path: str, dropped: list[str], keep: int) -> object:
    """Runs (lists of tables) are kept, each summarised; any other list longer than
    ``keep`` (a curve, a series) becomes its length."""
    if isinstance(value, dict):
        return {k: _summarised(v, f"{path}.{k}", dropped, keep) for k, v in value.items()}
    if isinstance(value, list):
        if all(isinstance(item, dict) for item in value):
            return [_summarised(item, f"{path}[]", dropped, keep) for item in value]
        if len(value) > keep:
            dropped.append(path)
            return {"summarised_items": len(value)}
    return value


def summarise(document: dict, keep: int = KEPT_ITEMS) -> dict:
    """``document`` with the long lists of its suites' runs replaced by their lengths."""
    dropped: list[str] = []
    out = {key: document[key] for key in KEPT_KEYS if key in document}
    out["suites"] = _summarised(document.get("suites", {}), "suites", dropped, keep)
    out["summarised"] = {"kept_items": keep, "dropped": sorted(set(dropped))}
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--keep", type=int, default=KEPT_ITEMS)
    arguments = parser.parse_args(argv)
    path: Path = arguments.record
    before = path.stat().st_size
    document = summarise(json.loads(path.read_text(encoding="utf-8")), arguments.keep)
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"{path}: {before:,} bytes -> {path.stat().st_size:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
