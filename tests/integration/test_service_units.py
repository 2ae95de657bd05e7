"""The systemd unit and launchd agent: valid files, filled in with real paths, installable."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, daemon_env, memoryd_command

from memoryd.config import Settings, load_settings
from memoryd.service_units import LAUNCHD_LABEL, ServiceManager, render_launchd, render_systemd


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return load_settings(None, state_dir=str(tmp_path / "state dir"), shutdown_grace="5s")


def _directives(unit: str) -> dict[str, str]:
    found = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            found[key] = value
    return found


def test_rendered_systemd_unit_has_the_contract(settings: Settings, tmp_path: Path) -> None:
    """Type=notify, a watchdog, no restart on exit 78, stop timeout above memoryd's grace."""
    config = tmp_path / "config.yaml"
    unit = render_systemd(settings, [sys.executable, "-m", "memoryd"], config)
    d = _directives(unit)
    assert d["Type"] == "notify" and d["WatchdogSec"] and d["Restart"] == "on-failure"
    assert d["RestartPreventExitStatus"] == "73 74 78"
    assert int(d["TimeoutStopSec"].rstrip("s")) > settings.shutdown_grace
    assert d["ExecStart"].split()[0] == sys.executable
    assert d["ExecStart"].endswith(f"run --config {config}")
    assert d["ReadWritePaths"] == f'-"{settings.state_dir}"'
    assert d["ProtectSystem"] == "strict" and d["NoNewPrivileges"] == "yes"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (Debian package systemd)")
def test_systemd_analyze_verifies_the_unit(settings: Settings, tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts the unit as memoryd installs it."""
    unit = tmp_path / "memoryd.service"
    unit.write_text(render_systemd(settings, [sys.executable, "-m", "memoryd"], None))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert "memoryd.service" not in result.stderr, result.stderr


def test_launchd_plist_parses_and_names_a_real_program(settings: Settings, tmp_path: Path) -> None:
    """The repo plist parses; the rendered one runs this memoryd and restarts only on crashes."""
    template = plistlib.loads((REPO / "launchd" / f"{LAUNCHD_LABEL}.plist").read_bytes())
    assert template["Label"] == LAUNCHD_LABEL
    rendered = plistlib.loads(render_launchd(settings, [sys.executable, "-m", "memoryd"], None,
                                             tmp_path))
    program = Path(rendered["ProgramArguments"][0])
    assert program.exists() and rendered["ProgramArguments"][-1] == "run"
    assert rendered["RunAtLoad"] is True
    assert rendered["KeepAlive"]["SuccessfulExit"] is False
    assert rendered["ExitTimeOut"] > settings.shutdown_grace
    assert rendered["ProcessType"] == "Background"
    assert rendered["StandardErrorPath"].startswith(str(tmp_path))


def test_macos_plan_uses_launchctl(settings: Settings, tmp_path: Path) -> None:
    """On macOS install bootstraps the agent into the user's GUI domain."""
    manager = ServiceManager(settings, platform="macos", home=tmp_path, config=None)
    plan = manager.install()
    assert manager.unit_path == tmp_path / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    assert plan.commands[-1][:2] == ["launchctl", "bootstrap"]
    assert "launchctl" in manager.simple("stop").commands[0]


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    """`service install --dry-run` prints the unit and the commands and writes nothing."""
    env = daemon_env(tmp_path) | {"HOME": str(tmp_path / "home")}
    result = subprocess.run(memoryd_command("service", "install", "--dry-run"), env=env,
                            capture_output=True, text=True, check=True)
    assert "Type=notify" in result.stdout or "<plist" in result.stdout
    assert "systemctl --user enable --now memoryd.service" in result.stdout or \
        "launchctl bootstrap" in result.stdout
    assert not (tmp_path / "home").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="the systemd install path is Linux's")
def test_install_writes_unit_and_uninstall_keeps_data(tmp_path: Path) -> None:
    """Install writes the unit (and reports a service manager it cannot reach); uninstall
    removes only the unit and says where the data stays."""
    home = tmp_path / "home"
    env = daemon_env(tmp_path) | {"HOME": str(home),
                                  "XDG_DATA_HOME": str(home / ".local" / "share")}
    result = subprocess.run(memoryd_command("service", "install"), env=env,
                            capture_output=True, text=True)
    unit = home / ".config" / "systemd" / "user" / "memoryd.service"
    assert unit.exists()
    assert f"wrote {unit}" in result.stdout
    if result.returncode != 0:  # no user service manager here (containers, CI)
        assert result.returncode == 69
        assert "service manager is not reachable" in result.stderr
    assert "ExecStart=" in unit.read_text()
    state = home / ".local" / "share" / "memoryd"
    assert state.is_dir()
    result = subprocess.run(memoryd_command("service", "uninstall"), env=env,
                            capture_output=True, text=True)
    assert not unit.exists()
    assert f"your data stays in {state}" in result.stdout


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("systemctl") is None,
                    reason="systemctl is Linux's")
def test_service_status_without_a_user_bus_is_one_sentence(tmp_path: Path) -> None:
    """Issue 36.11: no systemd user session (a container, an ssh login without lingering):
    one sentence saying so and what to do, status 69, not D-Bus's own words."""
    home = tmp_path / "home"
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in daemon_env(tmp_path).items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env |= {"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    for action in ("status", "start", "stop"):
        done = subprocess.run(memoryd_command("service", action), env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 69, (action, done.stderr)
        assert done.stderr.count("\n") == 1 and "Failed to connect" not in done.stderr
        assert "service manager is not reachable" in done.stderr


def test_uninstall_without_a_service_is_nothing_to_do(tmp_path: Path) -> None:
    """Someone who only ever used `memoryd run`: uninstall says there is no service,
    claims to have removed nothing, runs no service manager (none on PATH here) and
    exits 0, so a removal recipe that starts with it goes on."""
    home = tmp_path / "home"
    env = daemon_env(tmp_path) | {"HOME": str(home), "PATH": str(Path(sys.executable).parent)}
    done = subprocess.run(memoryd_command("service", "uninstall"), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "removed" not in done.stdout and "ran " not in done.stdout
    assert "is installed" in done.stdout and "nothing to stop or remove" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize("platform", ["linux", "macos"])
def test_restart_asks_the_service_manager(settings: Settings, tmp_path: Path,
                                          platform: str) -> None:
    """`memoryd service restart` is one command of the platform's service manager."""
    command = ServiceManager(settings, platform=platform, home=tmp_path,
                             config=None).simple("restart").commands
    assert command == ([["systemctl", "--user", "restart", "memoryd.service"]]
                       if platform == "linux" else
                       [["launchctl", "kickstart", "-k",
                         f"gui/{os.getuid()}/{LAUNCHD_LABEL}"]])
