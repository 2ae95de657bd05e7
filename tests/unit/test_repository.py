"""One project across worktrees and sub-directories (issue 31.4), read from real git
repositories made by `git` itself."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from memoryd.repository import project_root


def _git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "shop"
    (repo / "lib" / "cart").mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / "lib" / "cart" / "x.ex").write_text("x\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "first", cwd=repo)
    return repo


def test_worktrees_and_sub_directories_are_one_project(repository: Path,
                                                       tmp_path: Path) -> None:
    """The main tree, a sub-directory, a linked worktree elsewhere on disk and a
    sub-directory of that worktree all name the repository's main tree."""
    other = tmp_path / "elsewhere" / "shop-feature"
    _git("worktree", "add", "-q", "-b", "feature", str(other), cwd=repository)
    assert (other / ".git").is_file()
    for directory in (repository, repository / "lib" / "cart", other, other / "lib" / "cart"):
        assert project_root(str(directory)) == str(repository), directory


def test_different_repositories_never_share(repository: Path, tmp_path: Path) -> None:
    """Isolation: another repository, a nested submodule-like checkout with its own git
    directory, and a folder outside any repository each stay their own project."""
    second = tmp_path / "blog"
    second.mkdir()
    _git("init", "-q", cwd=second)
    nested = repository / "vendor" / "lib"
    nested.mkdir(parents=True)
    _git("init", "-q", "--separate-git-dir", str(tmp_path / "lib.git"), cwd=nested)
    plain = tmp_path / "notes"
    plain.mkdir()
    assert project_root(str(second)) == str(second)
    assert project_root(str(nested)) == str(nested)
    assert project_root(str(plain)) == str(plain)
    assert project_root(str(tmp_path / "gone" / "away")) == str(tmp_path / "gone" / "away")


def test_a_home_directory_in_git_is_not_every_folders_project(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dotfiles kept in a repository at $HOME must not merge every project below it."""
    home = tmp_path / "home"
    (home / "code" / "app").mkdir(parents=True)
    _git("init", "-q", cwd=home)
    monkeypatch.setenv("HOME", str(home))
    assert project_root(str(home / "code" / "app")) == str(home / "code" / "app")
