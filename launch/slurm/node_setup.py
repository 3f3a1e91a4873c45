"""What a batch script runs on the nodes, said before it is submitted: the interpreter
(``slurm.python``, else ``python3`` from the nodes' ``PATH`` once ``slurm.setup`` has run),
the set-up lines, and where the user's own modules come from (``slurm.pythonpath``, put
first on the job's ``PYTHONPATH``).

The script names a path only where the config does: a path of the submitting machine
(its virtualenv, the folder a user's module was found in here) reaches the nodes only when
the user sets it. What the nodes would miss is said instead, as warnings, with the setting
that gives it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launch.config import RunConfig
from launch.user_modules import user_roots

DEFAULT_PYTHON = "python3"


def node_python(config: RunConfig) -> str:
    return config.slurm.python or DEFAULT_PYTHON


def script_lines(config: RunConfig) -> list[str]:
    """The script's lines that prepare a node: the set-up, then the user's folders."""
    lines = []
    if not config.slurm.python:
        lines.append(
            f"# {DEFAULT_PYTHON}: the nodes' own, found on PATH after the setup "
            "(slurm.python unset)"
        )
    if config.slurm.setup.strip():
        lines += ["# setup from the config's slurm.setup", config.slurm.setup.strip()]
    folders = config.slurm.pythonpath
    if folders:
        # In double quotes, as slurm.setup's lines are read: $HOME expands.
        joined = ":".join(_double_quoted(folder) for folder in folders)
        lines += [
            "# the user's modules, from the config's slurm.pythonpath",
            f'export PYTHONPATH="{joined}${{PYTHONPATH:+:$PYTHONPATH}}"',
        ]
    elif roots := user_roots(config):
        modules = ", ".join(roots)
        lines.append(f"# {modules}: from PYTHONPATH as sbatch exports it (slurm.pythonpath unset)")
    return lines


def _double_quoted(text: str) -> str:
    return "".join("\\" + c if c in '"\\`' else c for c in text)


def plan_lines(config: RunConfig, run_dir: Path) -> list[str]:
    """What the nodes will run and import, a line each, then ``warning:`` lines for what
    they would miss."""
    slurm = config.slurm
    lines, warnings = [], []
    if slurm.python:
        lines.append(f"python on the nodes: {slurm.python} (slurm.python)")
    else:
        lines.append(
            f"python on the nodes: {DEFAULT_PYTHON} from their PATH after the setup lines "
            f"(slurm.python unset; this machine runs {sys.executable})"
        )
    setup = [line for line in slurm.setup.splitlines() if line.strip()]
    lines.append(
        f"setup lines: {len(setup)} from slurm.setup"
        if setup
        else "setup lines: none (slurm.setup unset): the roles run in the environment "
        "sbatch exports from this shell"
    )
    roots = user_roots(config)
    by_folder: dict[Path, list[str]] = {}
    for module, root in roots.items():
        by_folder.setdefault(root, []).append(module)
    for root, modules in by_folder.items():
        named = f"your module{'s' if len(modules) > 1 else ''} {', '.join(modules)}"
        if str(root) in slurm.pythonpath:
            lines.append(f"{named}: from slurm.pythonpath ({root})")
        else:
            warnings.append(
                f"{named} imported here from {root}, which the script does not name: set "
                f'slurm.pythonpath = ["{root}"] (as the nodes see that folder), or install '
                "them where the nodes' python finds them"
            )
    if not roots and slurm.pythonpath:
        lines.append(f"PYTHONPATH on the nodes starts with: {':'.join(slurm.pythonpath)}")
    named = [("slurm.python", slurm.python)] if slurm.python else []
    named += [("slurm.pythonpath", folder) for folder in slurm.pythonpath]
    for setting, path in named:
        if _on_another_filesystem(Path(path), run_dir):
            warnings.append(
                f"{setting} {path} is on another filesystem of this machine than the run "
                f"directory, which every node must see: check the nodes see {path} too"
            )
    return lines + [f"warning: {w}" for w in warnings]


def _on_another_filesystem(path: Path, run_dir: Path) -> bool:
    """Whether ``path`` exists here on a device other than the run directory's (its
    nearest existing folder's); False where either cannot be told."""
    if not path.is_absolute() or not path.exists():
        return False
    folder = run_dir
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    try:
        return os.stat(path).st_dev != os.stat(folder).st_dev
    except OSError:
        return False
