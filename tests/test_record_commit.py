"""A record made on another machine (a lent GPU) names the commit sent, and is clean only
if every tracked file there has the blob hash the commit's file list names."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bench.machine import git_commit, tree_matches


def git(directory: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


@pytest.fixture
def committed(tmp_path: Path) -> tuple[Path, Path, str]:
    """A repository with a file, one in a folder and a link; its commit's file list
    outside it (as the sender writes it); the commit."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "a.py").write_text("print('a')\n")
    (repo / "pkg" / "b.bin").write_bytes(bytes(range(256)) * 3)
    os.symlink("a.py", repo / "link")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    manifest = tmp_path / "manifest.txt"
    manifest.write_text(git(repo, "ls-tree", "-r", "HEAD"))
    return repo, manifest, git(repo, "rev-parse", "HEAD").strip()


def test_the_sent_tree_matches_its_commit_and_a_changed_file_is_named(committed) -> None:
    repo, manifest, _ = committed
    assert tree_matches(repo, manifest) == []
    (repo / "untracked.txt").write_text("not in the commit: not checked, as git status -uno")
    assert tree_matches(repo, manifest) == []
    (repo / "pkg" / "b.bin").write_bytes(b"changed")
    (repo / "a.py").unlink()  # the link now points nowhere, but is still the same link
    assert tree_matches(repo, manifest) == ["a.py", "pkg/b.bin"]
    assert tree_matches(repo, manifest.with_name("missing")) == ["<manifest unreadable>"]


def test_a_stated_commit_is_clean_only_with_a_matching_manifest(committed, monkeypatch) -> None:
    repo, manifest, commit = committed
    monkeypatch.setenv("APEX_GIT_COMMIT", commit)
    assert git_commit(repo)["dirty"] is None  # stated, nothing to check it against
    monkeypatch.setenv("APEX_GIT_MANIFEST", str(manifest))
    record = git_commit(repo)
    assert record["commit"] == commit and record["stated"] and record["dirty"] is False
    (repo / "a.py").write_text("print('b')\n")
    assert git_commit(repo)["files_differing"] == ["a.py"]
    assert git_commit(repo)["dirty"] is True
