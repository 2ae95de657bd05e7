"""The import name is the distribution's: `memoryd`, and nothing of it answers to `daemon`.

`daemon` is python-daemon's import name; a package of that name installed beside it
would break one or the other.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import memoryd

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_one_package_named_memoryd() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["name"] == "memoryd"
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["memoryd"]
    assert project["project"]["scripts"] == {"memoryd": "memoryd.entry:main"}
    assert not (ROOT / "daemon").exists()


def test_nothing_is_importable_as_daemon() -> None:
    assert Path(memoryd.__file__).parent == ROOT / "memoryd"
    for module in ("daemon.entry", "daemon.service", "daemon.cli"):
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:  # no `daemon` at all (a leftover empty folder is one)
            found = None
        assert found is None, module
    script = metadata.distribution("memoryd").entry_points.select(group="console_scripts")
    assert [e.value for e in script] == ["memoryd.entry:main"]


def test_python_dash_m_memoryd_is_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "memoryd", "--help"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "run" in done.stdout
