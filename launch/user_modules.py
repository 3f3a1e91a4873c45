"""Where a run's own code comes from: the modules its entry points name (``[env] make``, an
env id of the ``module:Id`` form, ``learner.network``), and the folder each is imported
from, so that every process of the run imports the same code.

A run config file's folder is on the import path of the process that reads it, as
pytest's ``prepend`` mode puts a test's: the first folder up from the file that is not
a package (``examples/grid_world.toml`` sits in the package ``examples``, so the folder
above it). A local run hands its roles the folders its user modules were found in
(``PYTHONPATH``), wherever the script or shell that started it stands; a Slurm run names
them only where ``slurm.pythonpath`` says (the nodes' paths are the user's to give).
"""

from __future__ import annotations

import importlib.util
import os
import site
import sys
import sysconfig
from pathlib import Path

from launch.config import RunConfig


def config_root(config_file: Path) -> Path:
    """The folder that makes a config file's neighbouring modules importable."""
    folder = config_file.resolve().parent
    while (folder / "__init__.py").exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def put_on_import_path(folder: Path) -> None:
    """``folder`` first on this process's import path, once."""
    text = str(folder)
    if text not in sys.path:
        sys.path.insert(0, text)


def entry_modules(config: RunConfig) -> list[str]:
    """The modules the run's entry points name, in the order the settings give them."""
    named = [config.env_make, config.learner.network]
    if ":" in config.env and not config.env_make:
        named.append(config.env)
    modules = [text.partition(":")[0] for text in named if ":" in text]
    return list(dict.fromkeys(m for m in modules if m))


def _installed_roots() -> set[Path]:
    paths = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
    paths |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return {Path(p).resolve() for p in paths}


def import_root(module: str) -> Path | None:
    """The import-path folder ``module`` is found in here; None where it is not found, or
    is installed (site-packages, the standard library: the interpreter's own)."""
    top = module.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    origin = Path(locations[0]) if locations else Path(spec.origin or "")
    if not origin.is_absolute():
        return None  # built in, frozen
    root = origin.resolve().parent
    installed = _installed_roots()
    if root in installed or any(parent in installed for parent in root.parents):
        return None
    return root


def user_roots(config: RunConfig) -> dict[str, Path]:
    """Each entry module found outside the interpreter's own folders, with its folder."""
    roots = {module: import_root(module) for module in entry_modules(config)}
    return {module: root for module, root in roots.items() if root is not None}


def roles_environment(config: RunConfig) -> dict[str, str]:
    """This process's environment, with the folders of the run's user modules first on
    ``PYTHONPATH``: the roles import them whatever their working folder."""
    folders = list(dict.fromkeys(str(root) for root in user_roots(config).values()))
    inherited = os.environ.get("PYTHONPATH", "")
    joined = os.pathsep.join([*folders, *([inherited] if inherited else [])])
    return {**os.environ, **({"PYTHONPATH": joined} if joined else {})}
