"""Fixtures shared by every test directory; plain helpers live in helpers.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from helpers import lay_out_fixtures
from hypothesis import settings

# CI explores the same examples every run, so a red build always reproduces;
# developers' runs explore new ones (HYPOTHESIS_PROFILE=dev is the default).
# No per-example deadline: these are correctness tests, and a loaded machine (a first
# example that warms caches, a CI box doing other work) must not fail them; speed is
# measured in benchmarks/.
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("dev", print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def _scratch() -> Path:
    """Every test's files, and those of every process it starts, live in a cache directory
    of this checkout's own (cleared at each run), never in /tmp (issue 36.1), and outside
    any git repository: a test's folders must not become the checkout's project."""
    checkout = str(Path(__file__).resolve().parent.parent)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "memoryd-tests" / hashlib.sha256(checkout.encode()).hexdigest()[:12]


SCRATCH = _scratch()


def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is None:
        config.option.basetemp = str(SCRATCH / "run")
    # `tempfile` in this process and in every subprocess (they inherit TMPDIR): the
    # PostgreSQL test server's directory, benchmarks' and agents' scratch files.
    scratch = SCRATCH / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(scratch)
    import tempfile

    tempfile.tempdir = None
    # A shell that exports a narrow COLUMNS would cut the tables the tests read through a
    # pipe (`render.width` honours it there); the tests that mean a width set their own.
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


@pytest.fixture
def fixture_roots(tmp_path: Path) -> dict[str, Path]:
    """Every real fixture transcript laid out as the agents would write them."""
    return lay_out_fixtures(tmp_path / "agents")


@pytest.fixture
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No config file, MEMORYD_* variable or home directory of this machine leaks into a
    test: the XDG directories and HOME point into the test's tmp_path, which is returned."""
    for name in list(os.environ):
        if name.startswith("MEMORYD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path
