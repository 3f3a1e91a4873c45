"""The packages' layering holds: ``replay <- apex <- launch``, with ``bench`` on top, and no
module of any of them takes part in an import circle. Read from the source, so a lazy
import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "replay": {"replay"},
    "apex": {"replay", "apex"},
    "launch": {"replay", "apex", "launch"},
    "bench": {"replay", "apex", "launch", "bench"},
}


def imports_of(path: Path) -> set[str]:
    """Every module of ours that ``path`` imports (dotted names)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.split(".")[0] in ALLOWED}


def modules(package: str) -> dict[str, Path]:
    return {f"{package}.{p.stem}": p for p in sorted((ROOT / package).glob("*.py"))}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_those_below_it(package: str) -> None:
    offending = {
        f"{module} imports {name}"
        for module, path in modules(package).items()
        for name in imports_of(path)
        if name.split(".")[0] not in ALLOWED[package]
    }
    assert not offending, sorted(offending)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_import_circle_among_a_packages_modules(package: str) -> None:
    known = modules(package)
    graph = {
        module: {name for name in imports_of(path) if name in known} - {module}
        for module, path in known.items()
    }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    circles = sorted(module for module in graph if reaches(module, module, {module}))
    assert not circles, circles


def test_no_module_of_the_packages_is_over_the_size_we_keep() -> None:
    # STYLE: a module does one thing and stays under about 400 lines.
    long = {
        str(path.relative_to(ROOT)): lines
        for package in ("replay", "apex", "launch")
        for path in modules(package).values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 420
    }
    assert not long, long
