"""Where a run's own modules come from (launch.user_modules): the folder of a config file's
neighbours, the entry points' modules, and the folders the roles are handed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launch.config import resolve
from launch.user_modules import (
    config_root,
    entry_modules,
    import_root,
    roles_environment,
    user_roots,
)

REPO = Path(__file__).parents[1]


def test_a_config_in_a_package_imports_from_the_folder_above_it(tmp_path: Path) -> None:
    assert config_root(REPO / "examples" / "grid_world.toml") == REPO
    (tmp_path / "task.toml").write_text("")
    assert config_root(tmp_path / "task.toml") == tmp_path


def test_the_entry_points_name_the_user_s_modules() -> None:
    config = resolve(
        {
            "env": {"make": "examples.grid_world:make", "id": "GridWorld"},
            "learner": {"network": "examples.grid_network:q_network"},
        },
        sized=False,
    )
    assert entry_modules(config) == ["examples.grid_world", "examples.grid_network"]
    assert entry_modules(resolve({"env": "CartPole-v1"}, sized=False)) == []


def test_only_modules_outside_the_interpreter_s_folders_are_carried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_task_module.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_root("my_task_module") == tmp_path.resolve()
    assert import_root("numpy") is None  # installed
    assert import_root("json") is None  # the standard library
    assert import_root("no_such_module_here") is None
    assert "my_task_module" not in sys.modules  # found, not imported


def test_the_roles_get_the_user_s_folders_first_on_their_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/already/there")
    config = resolve({"env": {"make": "examples.grid_world:make", "id": "GridWorld"}}, sized=False)
    assert user_roots(config) == {"examples.grid_world": REPO}
    assert roles_environment(config)["PYTHONPATH"] == f"{REPO}:/already/there"
