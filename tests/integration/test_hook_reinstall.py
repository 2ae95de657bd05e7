"""Hooks that survive memoryd moving (issue 61.4): what `hooks install` writes never names
a file inside the installed package, never fails the agent when what it runs is gone, and
`hooks status` and `doctor` say when it is."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import daemon_env, memoryd_command, wait_ready, write_config
from structlog.testing import capture_logs

from memoryd.hooks.script import PACKAGED_CLIENT, parse_command, stable_client


def _memoryd(env: dict[str, str], config: Path, *args: str
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          capture_output=True, text=True, timeout=120, cwd=env["HOME"])


@pytest.fixture
def installed(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """Claude's hooks installed by the real CLI into a HOME of the test's own."""
    home = tmp_path / "home"
    home.mkdir()
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {"claude": tmp_path / "claude"})
    env = {**daemon_env(tmp_path), "HOME": str(home)}
    done = _memoryd(env, config, "hooks", "install", "--agent", "claude")
    assert done.returncode == 0, done.stderr
    return env, config, state


def _commands(home: Path) -> dict[str, str]:
    document = json.loads((home / ".claude" / "settings.json").read_text())
    return {event: groups[0]["hooks"][0]["command"]
            for event, groups in document["hooks"].items()}


def _run_hook(command: str, env: dict[str, str], payload: dict[str, Any]
              ) -> subprocess.CompletedProcess[str]:
    """As Claude Code runs a hook: the command through `/bin/sh -c`, the payload on stdin."""
    return subprocess.run(["/bin/sh", "-c", command], input=json.dumps(payload), env=env,
                          capture_output=True, text=True, timeout=60)


def test_installed_hooks_name_nothing_inside_the_package(
        installed: tuple[dict[str, str], Path, Path]) -> None:
    """Every command names memoryd's own copy of the client in its state directory, the
    same bytes as the packaged one, and no path inside the installed package."""
    env, _config, state = installed
    package = str(PACKAGED_CLIENT.parent.parent)
    for event, command in _commands(Path(env["HOME"])).items():
        run = parse_command(command)
        assert run is not None and run.guarded, command
        assert run.client == str(stable_client(state)), command
        assert package not in command, (event, command)
    assert stable_client(state).read_bytes() == PACKAGED_CLIENT.read_bytes()


def test_a_hook_whose_client_or_memoryd_is_gone_exits_0_and_says_nothing(
        installed: tuple[dict[str, str], Path, Path]) -> None:
    """The client deleted, or memoryd's executable gone: every hook exits 0 with nothing on
    stdout or stderr (an exit 2 from UserPromptSubmit would block the person's prompt)."""
    env, _config, state = installed
    home = Path(env["HOME"])
    payload = {"session_id": "s1", "transcript_path": "/nonexistent.jsonl", "cwd": str(home),
               "hook_event_name": "UserPromptSubmit", "prompt": "hello"}
    commands = _commands(home)
    for command in commands.values():
        assert _run_hook(command, env, payload).returncode == 0
    stable_client(state).unlink()
    for event, command in commands.items():
        done = _run_hook(command, env, payload)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), (event, done)
    # The client back, memoryd gone (uninstalled, or a virtual environment removed).
    subprocess.run(memoryd_command("hooks", "install", "--agent", "claude"), env=env,
                   check=True, capture_output=True, timeout=120, cwd=env["HOME"])
    for event, command in _commands(home).items():
        run = parse_command(command)
        assert run is not None
        words = shlex.split(command)
        words[words.index(run.memoryd)] = str(home / "gone" / "memoryd")
        done = _run_hook(shlex.join(words), env, payload)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), (event, done)


def test_status_and_doctor_say_when_a_hook_runs_what_is_gone(
        installed: tuple[dict[str, str], Path, Path]) -> None:
    """A hook an earlier install wrote into the package's path, now gone (`pip install`
    again): `hooks status` names it and exits 69, `doctor` fails its hooks check; after
    `hooks install` again both are content."""
    env, config, _state = installed
    home = Path(env["HOME"])
    status = _memoryd(env, config, "hooks", "status", "--agent", "claude")
    assert status.returncode == 0 and "broken" not in status.stdout, status.stdout
    settings = home / ".claude" / "settings.json"
    document = json.loads(settings.read_text())
    gone = "/opt/old-venv/lib/python3.11/site-packages/memoryd/hooks/memoryd-hook.sh"
    command = document["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    run = parse_command(command)
    assert run is not None
    document["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"] = shlex.join(
        ["/bin/sh", gone, run.memoryd, *run.argv])
    settings.write_text(json.dumps(document))

    status = _memoryd(env, config, "hooks", "status", "--agent", "claude")
    assert status.returncode == 69, (status.returncode, status.stdout, status.stderr)
    assert f"broken: {gone} is missing" in status.stdout
    listed = _memoryd(env, config, "hooks", "status", "--agent", "claude", "--json")
    assert listed.returncode == 69 and json.loads(listed.stdout)[0]["broken"]
    doctor = _memoryd(env, config, "doctor")
    said = [line for line in doctor.stdout.splitlines() if line[6:].startswith("hooks:")]
    assert said and "fail" in said[0] and gone in said[0], doctor.stdout + doctor.stderr
    assert doctor.returncode != 0

    assert _memoryd(env, config, "hooks", "install", "--agent", "claude").returncode == 0
    assert _memoryd(env, config, "hooks", "status", "--agent", "claude").returncode == 0
    doctor = _memoryd(env, config, "doctor")
    said = [line for line in doctor.stdout.splitlines() if line[6:].startswith("hooks:")]
    assert said and "ok" in said[0] and "fail" not in said[0], doctor.stdout


def test_the_daemon_brings_the_hooks_client_up_to_date_at_start(
        installed: tuple[dict[str, str], Path, Path]) -> None:
    """An upgrade's client reaches installed hooks when `memoryd run` starts."""
    env, config, state = installed
    client = stable_client(state)
    client.write_text("# an older memoryd's client\nexit 0\n")
    proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(state, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert client.read_bytes() == PACKAGED_CLIENT.read_bytes()
    assert os.stat(client).st_mode & 0o077 == 0


def test_a_viewer_whose_files_were_replaced_says_restart_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package's viewer files gone under a running daemon: its pages answer 503 with
    the restart hint (no traceback), logged once."""
    from starlette.testclient import TestClient

    from memoryd.errors import FILES_REPLACED
    from memoryd.ui import app as viewer

    monkeypatch.setattr(viewer, "HERE", tmp_path / "replaced")
    app = viewer.make_app(object(), "s3cret")  # type: ignore[arg-type]
    with capture_logs() as logs, TestClient(app, base_url="http://127.0.0.1:8765") as client:
        client.get("/login", params={"token": "s3cret"}, follow_redirects=False)
        answers = [client.get("/static/viewer.css"), client.get("/static/viewer.css")]
    for answer in answers:
        assert answer.status_code == 503 and FILES_REPLACED in answer.text, answer.text
    assert [e["event"] for e in logs].count("ui_files_replaced") == 1
