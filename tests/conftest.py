"""Fixtures shared by every test directory; plain helpers live in helpers.py."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
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


#: The longest path a test makes under the scratch directory: an end-to-end test's daemon
#: socket, `<scratch>/run/claude-story0/home/.local/share/memoryd/memoryd.sock`.
_LONGEST_BELOW = 60
#: What a Unix socket's path may hold (108 bytes with its terminating NUL on Linux).
_SOCKET_PATH_MAX = 107


def _scratch() -> Path:
    """Every test's files, and those of every process it starts, live in a directory of
    this run's own, removed when the run ends, outside any git repository (a test's
    folders must not become the checkout's project): under the cache directory, or
    where a long HOME would make a daemon's socket path longer than a socket allows,
    under /tmp. Two runs of one checkout never share one."""
    checkout = str(Path(__file__).resolve().parent.parent)
    key = hashlib.sha256(checkout.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    base = cache / "memoryd-tests" / key
    run = f"r{os.getpid()}"
    if len(os.fsencode(base / run)) + _LONGEST_BELOW > _SOCKET_PATH_MAX:
        base = Path("/tmp") / f"memoryd-tests-{key[:8]}"
    return base / run


SCRATCH = _scratch()


def _clear_scratch() -> None:
    shutil.rmtree(SCRATCH, ignore_errors=True)
    with contextlib.suppress(OSError):
        SCRATCH.parent.rmdir()  # when no other run is using it


def _clear_abandoned() -> None:
    """The directories of earlier runs that were killed before they could remove theirs."""
    if not SCRATCH.parent.is_dir():
        return
    for other in SCRATCH.parent.iterdir():
        pid = other.name[1:]
        if other == SCRATCH:
            continue
        if other.name.startswith("r") and pid.isdigit():
            try:
                os.kill(int(pid), 0)
                continue  # another run of this checkout, still going
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        shutil.rmtree(other, ignore_errors=True)


# Registered first, so run last (after the PostgreSQL test server's own clean-up).
atexit.register(_clear_scratch)


@pytest.fixture(scope="session", autouse=True)
def _no_process_left() -> Iterator[None]:
    """No daemon, server or agent a test started outlives the run, whatever the test did."""
    yield
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(children, timeout=10)


def pytest_configure(config: pytest.Config) -> None:
    _clear_abandoned()
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
