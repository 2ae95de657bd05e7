"""The shell hook client (`memoryd/hooks/memoryd-hook.sh`), run as `hooks install` wrote it.

Each test takes the command from the settings file the installer wrote and runs it
with `sh -c`, as the agents do, against a real `memoryd run` on its socket. The
memoryd executable the command names is a wrapper that notes each call, so a test
can tell whether curl answered or the command handed its payload to the Python hook.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import socketserver
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import memoryd_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_agents import PROJECT, Daemon, claude_payload, context_of, quick_daemon

from memoryd.hooks.install import Installer, settings_path
from memoryd.hooks.script import PACKAGED_CLIENT
from memoryd.names import AGENT_EVENTS, AGENT_HOME_ENV

if shutil.which("curl") is None and os.environ.get("HOOK_CLIENT_TESTS_REQUIRE_CURL") != "1":
    pytest.skip("SKIPPED: no curl here, so the shell hook client always hands its payload"
                " to the Python hook; its fast path is not tested", allow_module_level=True)


class Client:
    """The hooks `hooks install` wrote for a daemon's socket, and a way to run them."""

    def __init__(self, daemon: Daemon, socket: Path | None = None) -> None:
        self.daemon = daemon
        self.calls = daemon.tmp / "python-hook-calls"
        self.calls.unlink(missing_ok=True)
        wrapper = daemon.tmp / "bin" / "memoryd"
        wrapper.parent.mkdir(exist_ok=True)
        wrapper.write_text(f'#!/bin/sh\necho "$*" >> {self.calls}\n'
                           f'exec {sys.executable} -m memoryd "$@"\n')
        wrapper.chmod(0o755)
        home = daemon.tmp / "agent-home"
        self.installer = Installer(memoryd=str(wrapper), socket=socket or daemon.socket,
                                   hook_timeout=2.0, home=home, project=daemon.tmp / "project",
                                   records=daemon.tmp / "integrations.json",
                                   client=daemon.tmp / "hooks" / "memoryd-hook.sh")

    def command(self, agent: str, event: str) -> str:
        self.installer.hooks(agent, "user", install=True, dry_run=False)  # type: ignore[arg-type]
        path = settings_path(agent, "hooks", "user", self.installer.home,  # type: ignore[arg-type]
                             self.installer.project)
        groups = json.loads(path.read_text())["hooks"][event]
        return str(groups[0]["hooks"][0]["command"])

    def run(self, agent: str, event: str, payload: dict[str, Any] | bytes, *,
            timeout: float | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        command = self.command(agent, event)
        if timeout is not None:
            command = command.replace("--timeout 2 ", f"--timeout {timeout:g} ")
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        done = subprocess.run(["sh", "-c", command], input=data, capture_output=True,
                              timeout=60, env={**self.daemon.env,
                                               "MEMORYD_CONFIG": str(self.daemon.config),
                                               **(env or {})})
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                           done.stderr.decode())

    def python_hook_calls(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with quick_daemon(tmp_path) as found:
        yield found


def test_curl_answers_what_the_python_hook_answers_without_starting_python(
        daemon: Daemon) -> None:
    """With the daemon up, the installed hooks of all three agents get the same block the
    Python hook gets, and no Python process is started for them."""
    daemon.start()
    client = Client(daemon)
    daemon.api("remember", {"content": "the payments API rate limit is 500 requests per minute",
                            "project": PROJECT})
    for agent, prompt_event in (("claude", "UserPromptSubmit"), ("codex", "UserPromptSubmit"),
                                ("gemini", "BeforeAgent")):
        events: list[tuple[str, dict[str, Any]]] = [
            ("SessionStart", {}), (prompt_event, {"prompt": "what rate limit applies?"})]
        for event, extra in events:
            shell = client.run(agent, event, claude_payload(event, f"{agent}-sh-{event}",
                                                             **extra))
            python = daemon.hook(agent, event, claude_payload(event, f"{agent}-py-{event}",
                                                              **extra))
            assert context_of(shell) is not None
            assert "500 requests per minute" in str(context_of(shell))
            assert json.loads(shell.stdout) == json.loads(python.stdout)
        unrelated = client.run(agent, prompt_event, claude_payload(
            prompt_event, f"{agent}-unrelated", prompt="how do I center a div in CSS?"))
        assert (unrelated.returncode, unrelated.stdout, unrelated.stderr) == (0, "", "")
    assert client.python_hook_calls() == 0
    with sqlite3.connect(daemon.state / "memoryd.db") as db:
        given = db.execute("SELECT COUNT(*) FROM injections WHERE agent_session_id LIKE '%-sh-%'"
                           " AND interface = 'hook'").fetchone()[0]
    assert given == 6  # the daemon records what the shell client gave, as for Python's


def test_without_a_daemon_the_payload_goes_to_the_python_hook(daemon: Daemon) -> None:
    """No daemon: the command hands the same payload to `memoryd hook`, which opens the
    stores itself and still gives the block."""
    daemon.start()
    daemon.api("remember", {"content": "the payments API rate limit is 500 requests per minute",
                            "project": PROJECT})
    daemon.stop()
    client = Client(daemon)
    done = client.run("claude", "UserPromptSubmit", claude_payload(
        "UserPromptSubmit", "down", prompt="what rate limit applies?"))
    assert "500 requests per minute" in str(context_of(done))
    assert client.python_hook_calls() == 1


def test_a_hung_daemon_costs_the_cap_and_is_not_recorded_as_giving(daemon: Daemon) -> None:
    """The daemon stopped (SIGSTOP): the hook exits 0 with nothing once its cap is spent,
    says so in hook.log, starts no Python; the daemon, resumed, does not record the block
    as given."""
    daemon.start()
    assert daemon.proc is not None
    daemon.api("remember", {"content": "the rate limit is 500/min", "project": PROJECT})
    client = Client(daemon)
    client.command("claude", "UserPromptSubmit")  # installed before the daemon stops
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        done = client.run("claude", "UserPromptSubmit", claude_payload(
            "UserPromptSubmit", "hung", prompt="what is the rate limit?"), timeout=1)
        took = time.monotonic() - started
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert took < 2.5
    assert client.python_hook_calls() == 0
    logged = [json.loads(line) for line in (daemon.state / "hook.log").read_text().splitlines()]
    assert any(line["event"] == "hook_timed_out" and line["agent"] == "claude"
               and line["seconds"] == 1 for line in logged)
    deadline = time.monotonic() + 20
    while "block_too_late" not in (daemon.tmp / "daemon.log").read_text():
        assert time.monotonic() < deadline, "the late request was never answered"
        time.sleep(0.1)
    with sqlite3.connect(daemon.state / "memoryd.db") as db:
        given = db.execute("SELECT COUNT(*) FROM injections WHERE agent_session_id = 'hung'"
                           ).fetchone()[0]
    assert given == 0


@pytest.mark.parametrize("payload", [b"", b"not json", b"[1]", b'{"prompt": 5}',
                                     b"\xff\xfe", b'{"session_id": null}'])
def test_bad_input_prints_nothing_and_exits_0(daemon: Daemon, payload: bytes) -> None:
    daemon.start()
    done = Client(daemon).run("claude", "UserPromptSubmit", payload)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_an_event_memoryd_does_not_handle_is_answered_with_nothing(daemon: Daemon) -> None:
    daemon.start()
    client = Client(daemon)
    command = client.command("claude", "SessionStart").replace("SessionStart", "Notification")
    done = subprocess.run(["sh", "-c", command], input=b"{}", capture_output=True, timeout=30,
                          env=daemon.env)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert client.python_hook_calls() == 0


class _Recorder(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A stand-in daemon on a Unix socket: records each request; answers /v1/hook with
    `hook_status`, and /v1/session_event (the Python hook's way) with a fixed block."""

    daemon_threads = True
    hook_status = 204

    def __init__(self, path: Path) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        super().__init__(str(path), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Recorder

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append((self.path, dict(self.headers.items()), body))
        if self.path.startswith("/v1/hook/"):
            self.send_response(self.server.hook_status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        answer = json.dumps({"ok": True, "context": "from session_event"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[_Recorder]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    server = _Recorder(state / "memoryd.sock")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_daemon_older_than_the_client_is_asked_the_python_way(
        tmp_path: Path, recorder: _Recorder) -> None:
    """A daemon without /v1/hook (404, running since before an upgrade): the payload goes
    to the Python hook, which asks `session_event` and prints its block."""
    with quick_daemon(tmp_path) as daemon:
        recorder.hook_status = 404
        client = Client(daemon)
        done = client.run("claude", "UserPromptSubmit", claude_payload(
            "UserPromptSubmit", "old", prompt="what rate limit applies?"))
    assert context_of(done) == "from session_event"
    assert client.python_hook_calls() == 1
    assert [path.split("?")[0] for path, _, _ in recorder.requests] == [
        "/v1/hook/claude/UserPromptSubmit", "/v1/session_event"]


_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=_text, session=_text, home=_text.filter(lambda t: "\x00" not in t))
def test_the_payload_and_the_agents_home_reach_the_daemon_exactly(
        tmp_path: Path, recorder: _Recorder, prompt: str, session: str, home: str) -> None:
    """Whatever the agent writes in its payload (quotes, backslashes, `%`, newlines, a
    leading `-`, any script) and wherever its environment moved its home, the daemon
    receives the payload and the home as they were."""
    with quick_daemon(tmp_path) as daemon:
        recorder.hook_status = 204
        recorder.requests.clear()
        client = Client(daemon)
        payload = {"session_id": session, "prompt": prompt, "cwd": "/x", "n": [1, None]}
        env = {AGENT_HOME_ENV["codex"][0]: home} if home else {}
        done = client.run("codex", "UserPromptSubmit", payload, env=env)
    [(path, headers, body)] = recorder.requests
    sent = headers.get("X-Memoryd-Agent-Home")
    if home != home.strip(" \t") or re.search(r"[\x00-\x1f\x7f]", home):
        # Not sendable as a header as it is: the Python hook sends it in its request.
        assert sent is None and client.python_hook_calls() == 1
        assert path == "/v1/session_event"
        assert json.loads(body)["transcript_root"].startswith(home)
        assert context_of(done) == "from session_event"
        return
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert client.python_hook_calls() == 0
    assert path == "/v1/hook/codex/UserPromptSubmit?timeout=2"
    assert json.loads(body) == payload
    # http.server reads header bytes as Latin-1: encoded back, they are what curl sent.
    assert (sent.encode("latin-1").decode() if sent is not None else "") == home


def test_the_client_names_the_same_agent_homes_as_the_daemon() -> None:
    """The script's agent -> environment variable table is names.AGENT_HOME_ENV."""
    script = PACKAGED_CLIENT.read_text()
    for agent, (variable, _folder) in AGENT_HOME_ENV.items():
        assert re.search(rf"^\s*{agent}\) home=\${{{variable}-}} ;;$", script, re.M), agent


def test_the_client_s_briefing_events_are_the_daemon_s() -> None:
    """The events the script leaves without a block under MEMORYD_BRIEFING=off are every
    agent's events that memoryd answers with one (start, prompt)."""
    script = PACKAGED_CLIENT.read_text()
    found = re.search(r"case \$event in ([A-Za-z |]+)\) exit 0", script)
    assert found is not None
    named = {e.strip() for e in found.group(1).split("|")}
    assert named == {agent_event for events in AGENT_EVENTS.values()
                     for agent_event, ours in events.items() if ours in ("start", "prompt")}


def test_a_session_started_without_a_briefing_is_given_nothing(daemon: Daemon) -> None:
    """`MEMORYD_BRIEFING=off` in the agent's environment: the installed hooks (curl and
    Python alike) give no block at the start or at a prompt (issue 62.5)."""
    daemon.start()
    client = Client(daemon)
    daemon.api("remember", {"content": "the payments API rate limit is 500 requests per minute",
                            "project": PROJECT})
    for agent, prompt_event in (("claude", "UserPromptSubmit"), ("gemini", "BeforeAgent")):
        for event, extra in (("SessionStart", {}),
                             (prompt_event, {"prompt": "what rate limit applies?"})):
            payload = claude_payload(event, f"{agent}-quiet", **extra)
            quiet = client.run(agent, event, payload, env={"MEMORYD_BRIEFING": "off"})
            assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", ""), quiet
            told = client.run(agent, event, claude_payload(event, f"{agent}-told-{event}",
                                                           **extra))
            assert "500 requests per minute" in str(context_of(told))
    quiet_python = subprocess.run(
        memoryd_command("hook", "--agent", "claude", "SessionStart"),
        input=json.dumps(claude_payload("SessionStart", "py-quiet")), capture_output=True,
        text=True, timeout=60, env={**daemon.env, "MEMORYD_CONFIG": str(daemon.config),
                                    "MEMORYD_BRIEFING": "off"})
    assert (quiet_python.returncode, quiet_python.stdout) == (0, ""), quiet_python
    # The rest of memoryd works in that environment: the MCP server and the commands the
    # agent starts there read the same settings (an unknown MEMORYD_ variable is refused).
    asked = subprocess.run(
        memoryd_command("recall", "payments rate limit", "--project", PROJECT, "--json"),
        capture_output=True, text=True, timeout=60,
        env={**daemon.env, "MEMORYD_CONFIG": str(daemon.config), "MEMORYD_BRIEFING": "off"})
    assert asked.returncode == 0, asked.stderr
    assert "500 requests per minute" in asked.stdout


def test_a_resumed_session_is_told_only_what_is_new(daemon: Daemon) -> None:
    """SessionStart again for the same session (a resume): nothing it was given already;
    after a compaction or /clear its context lost the block: all of it again (issue
    62.5)."""
    daemon.start()
    daemon.api("remember", {"content": "the payments API rate limit is 500 requests per minute",
                            "project": PROJECT})
    first = context_of(daemon.hook("claude", "SessionStart", claude_payload(
        "SessionStart", "resumed", source="startup")))
    assert first is not None and "500 requests" in first
    again = context_of(daemon.hook("claude", "SessionStart", claude_payload(
        "SessionStart", "resumed", source="resume")))
    assert again is None or "500 requests" not in again
    daemon.api("remember", {"content": "deploys freeze on Fridays", "project": PROJECT})
    newer = context_of(daemon.hook("claude", "SessionStart", claude_payload(
        "SessionStart", "resumed", source="resume")))
    assert newer is not None and "Fridays" in newer and "500 requests" not in newer
    compacted = context_of(daemon.hook("claude", "SessionStart", claude_payload(
        "SessionStart", "resumed", source="compact")))
    assert compacted is not None and "500 requests" in compacted and "Fridays" in compacted
    for _ in range(2):  # a start asked twice: the same block
        started = context_of(daemon.hook("claude", "SessionStart", claude_payload(
            "SessionStart", "resumed", source="startup")))
        assert started == compacted


def test_the_distillation_model_is_given_nothing(daemon: Daemon) -> None:
    """An agent CLI memoryd runs as the distillation model (`MEMORYD_DISTILLING` in its
    environment) gets no block from the shell client either, and the daemon hears of no
    session of its."""
    daemon.start()
    client = Client(daemon)
    daemon.api("remember", {"content": "the payments API rate limit is 500 requests per minute",
                            "project": PROJECT})
    for event, extra in (("SessionStart", {}),
                         ("UserPromptSubmit", {"prompt": "what rate limit applies?"})):
        quiet = client.run("claude", event, claude_payload(event, "distiller", **extra),
                           env={"MEMORYD_DISTILLING": "1"})
        assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", ""), quiet
    told = client.run("claude", "UserPromptSubmit", claude_payload(
        "UserPromptSubmit", "person", prompt="what rate limit applies?"))
    assert "500 requests per minute" in str(context_of(told))
    given = daemon.api("search_sessions", {"query": "distiller", "limit": 10}).json()
    assert "distiller" not in json.dumps(given)
