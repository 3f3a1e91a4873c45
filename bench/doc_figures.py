"""Checks that every figure the docs quote comes from a committed record.

A results row (a markdown table row) names its records as links to ``bench/results/*.json``
(relative to the markdown file), each followed by the commit it was made at:
``[replay](bench/results/replay-….json) @ 28288d5``.
Its checked figures are the bold numbers (``**5.0×**``, ``**22.3 s**``, ``**852K**``). The
check, for every row that links a record or holds a bold figure:

- each record is tracked by git, and was made from a clean tree at the commit named;
- every bold number occurs in one of the row's records, to the digits shown (``852K`` is
  a value that rounds to 852 thousands; ``1.01M``, ``909 MB``, ``92%`` likewise);
- a row with bold figures names at least one record, and a row naming a record shows at
  least one bold figure.

``python -m bench.doc_figures README.md bench/RESULTS.md`` prints the problems (exit 1 if
any); the test suite runs the same check.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD_LINK = re.compile(r"\]\(([^)\s]*results/[^)\s]+\.json)\)\s*@\s*([0-9a-f]{7,40})")
BOLD = re.compile(r"\*\*([^*]+)\*\*")
NUMBER = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*(KB|MB|GB|K|M|%)?")
# What a suffix may stand for in a record: bytes are recorded as bytes (10^n or 2^n to a
# unit) or already in the unit; a percentage as a fraction or in percent.
SCALES = {
    None: (1.0,),
    "K": (1e3,),
    "M": (1e6,),
    "KB": (1.0, 1e3, 2.0**10),
    "MB": (1.0, 1e6, 2.0**20),
    "GB": (1.0, 1e9, 2.0**30),
    "%": (0.01, 1.0),
}


def record_numbers(document: object) -> list[float]:
    """Every finite number a JSON document holds (booleans are not numbers)."""
    found: list[float] = []
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item):
            found.append(float(item))
    return found


def quoted_numbers(cell: str) -> list[tuple[str, float, int, str | None]]:
    """``(text, value, decimals, suffix)`` of each number in the bold parts of a cell."""
    quoted = []
    for bold in BOLD.findall(cell):
        for match in NUMBER.finditer(bold):
            digits, suffix = match.group(1).replace(",", ""), match.group(2)
            decimals = len(digits.partition(".")[2])
            start = match.start()
            # A minus that begins the figure is its sign; one between figures (2.2-3.0)
            # is a range's dash.
            negative = (
                start > 0 and bold[start - 1] in "-−" and bold[: start - 1].strip(" [(") == ""
            )
            value = -float(digits) if negative else float(digits)
            quoted.append((match.group(0).strip(), value, decimals, suffix))
    return quoted


def occurs(value: float, decimals: int, suffix: str | None, numbers: list[float]) -> bool:
    half_unit = 0.5 * 10.0**-decimals + 1e-9
    return any(
        abs(number / scale - value) <= half_unit for scale in SCALES[suffix] for number in numbers
    )


def tracked(paths: list[str]) -> set[str]:
    result = subprocess.run(
        ["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return set(result.stdout.split())


def check_rows(doc: Path, text: str | None = None) -> list[str]:
    """Every problem with the results rows of one markdown file (``text``: its content, if
    not the file's own; links are read relative to ``doc`` either way)."""
    problems: list[str] = []
    text = doc.read_text(encoding="utf-8") if text is None else text
    rows = [
        (number, line)
        for number, line in enumerate(text.splitlines(), 1)
        if line.startswith("|") and (RECORD_LINK.search(line) or BOLD.search(line))
    ]

    def in_repo(link: str) -> str:
        return (doc.parent / link).resolve().relative_to(ROOT).as_posix()

    links = sorted({in_repo(link) for _, line in rows for link, _ in RECORD_LINK.findall(line)})
    in_git = tracked(links) if links else set()
    for number, line in rows:
        where = f"{doc.name}:{number}"
        records = [(in_repo(link), commit) for link, commit in RECORD_LINK.findall(line)]
        quoted = quoted_numbers(line)
        if quoted and not records:
            problems.append(f"{where}: bold figures but no record named")
        if records and not quoted:
            problems.append(f"{where}: names a record but shows no bold figure")
        numbers: list[float] = []
        readable = True
        for path, commit in records:
            if path not in in_git:
                problems.append(f"{where}: {path} is not a committed record")
                readable = False
                continue
            document = json.loads((ROOT / path).read_text(encoding="utf-8"))
            git = document.get("git") or {}
            if not str(git.get("commit", "")).startswith(commit):
                problems.append(f"{where}: {path} was made at {git.get('commit')}, not {commit}")
            if git.get("dirty") is not False:
                problems.append(f"{where}: {path} was not made from a clean tree")
            numbers += record_numbers(document)
        for text, value, decimals, suffix in quoted:
            if records and readable and not occurs(value, decimals, suffix, numbers):
                problems.append(f"{where}: {text!r} is in none of its records")
    return problems


def main(argv: list[str]) -> int:
    docs = [Path(arg).resolve() for arg in argv]
    docs = docs or [ROOT / "README.md", ROOT / "bench" / "RESULTS.md"]
    problems = [problem for doc in docs for problem in check_rows(doc)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
