"""The `memoryd` command line as a user runs it: real subprocesses, real files."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    daemon_env,
    lay_out_fixtures,
    memoryd_command,
    wait_for,
    wait_ready,
    write_config,
)


def run_cli(tmp_path: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command(*args), env=daemon_env(tmp_path), capture_output=True,
                          text=True, timeout=120, check=check)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    roots = lay_out_fixtures(tmp_path / "agents")
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.5s")
    return config, state, roots


def _count(db: Path, sql: str, *params: object) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(sql, params).fetchone()[0])
    finally:
        conn.close()




@pytest.mark.parametrize("command", ["run", "ingest", "status", "sessions", "show 1"])
def test_bad_config_exits_78_naming_the_key(tmp_path: Path, command: str) -> None:
    """Every command refuses an unknown or bad setting with status 78 and one line naming it."""
    config = tmp_path / "bad.yaml"
    config.write_text("poll_intervall: 2s\n")
    result = run_cli(tmp_path, "--config", str(config), *command.split())
    assert result.returncode == 78
    expected = ["memoryd: config: poll_intervall: unknown setting"]
    assert result.stderr.strip().splitlines() == expected
    config.write_text("poll_interval: soon\n")
    result = run_cli(tmp_path, *command.split(), "--config", str(config))
    assert result.returncode == 78
    assert "poll_interval" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_environment_setting_exits_78(tmp_path: Path) -> None:
    """A MEMORYD_* variable that is not a setting is a configuration error too."""
    env = daemon_env(tmp_path) | {"MEMORYD_STATE_DIRR": str(tmp_path)}
    result = subprocess.run(memoryd_command("status"), env=env, capture_output=True, text=True)
    assert result.returncode == 78
    assert "MEMORYD_STATE_DIRR" in result.stderr


def test_every_command_has_help(tmp_path: Path) -> None:
    """`--help` works for the group and for each command, without reading any settings."""
    result = run_cli(tmp_path, "--help", check=True)
    commands = ["run", "ingest", "status", "sessions", "show"]
    for command in commands:
        assert command in result.stdout
        sub = run_cli(tmp_path, command, "--help", check=True)
        assert "Usage:" in sub.stdout


def test_ingest_once_then_status_sessions_show_json(setup: tuple[Path, Path, dict[str, Path]],
                                                    tmp_path: Path) -> None:
    """`ingest --once` stores the fixtures; status/sessions/show print stable, matching JSON."""
    config, state, _roots = setup
    result = run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    assert "stored" in result.stdout
    db = state / "memoryd.db"
    messages = _count(db, "SELECT COUNT(*) FROM session_messages")
    assert messages > 1000

    status = json.loads(run_cli(tmp_path, "--config", str(config), "status", "--json",
                                check=True).stdout)
    assert status["messages"] == messages
    assert status["daemon"]["running"] is False
    assert sum(s["messages"] for s in status["sources"]) == messages
    assert status["unsynced_messages"] == messages
    assert status["rejected_lines"] == _count(db, "SELECT COUNT(*) FROM rejected_lines")

    first = run_cli(tmp_path, "--config", str(config), "sessions", "--json", check=True).stdout
    again = run_cli(tmp_path, "--config", str(config), "sessions", "--json", check=True).stdout
    assert first == again
    sessions = json.loads(first)
    assert len(sessions) == _count(
        db, "SELECT COUNT(*) FROM sessions WHERE parent_session_id IS NULL")
    biggest = max(sessions, key=lambda s: s["message_count"])
    shown = json.loads(run_cli(tmp_path, "--config", str(config), "show", str(biggest["id"]),
                               "--json", check=True).stdout)
    assert [m["message_index"] for m in shown["messages"]] == list(range(biggest["message_count"]))
    by_prefix = json.loads(run_cli(tmp_path, "--config", str(config), "show",
                                   biggest["external_id"][:12], "--json", check=True).stdout)
    assert by_prefix["id"] == biggest["id"]
    missing = run_cli(tmp_path, "--config", str(config), "show", "no-such-session")
    assert missing.returncode == 66 and "no session matches" in missing.stderr


def test_run_follows_appends_stops_on_sigterm_and_refuses_a_second_daemon(
    setup: tuple[Path, Path, dict[str, Path]], tmp_path: Path
) -> None:
    """The daemon stores an appended line, blocks a second daemon, and exits 0 on SIGTERM."""
    config, state, roots = setup
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                            env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(state, proc.pid)
        db = state / "memoryd.db"
        second = run_cli(tmp_path, "--config", str(config), "run")
        assert second.returncode == 75 and "already running" in second.stderr
        second = run_cli(tmp_path, "--config", str(config), "ingest", "--once")
        assert second.returncode == 75

        transcript = roots["claude"] / "-home-user-project" / "live-session.jsonl"
        line = {"type": "user", "uuid": "u-live-1", "timestamp": "2026-01-02T03:04:05+02:00",
                "sessionId": "live-session", "cwd": "/home/user/project",
                "message": {"role": "user", "content": "remember the blue deploy lane"}}
        transcript.write_text(json.dumps(line) + "\n")
        wait_for(lambda: _count(db, "SELECT COUNT(*) FROM session_messages WHERE uuid = ?",
                                 "u-live-1") == 1)
        conn = sqlite3.connect(db)
        stamp = conn.execute("SELECT timestamp FROM session_messages WHERE uuid = 'u-live-1'"
                             ).fetchone()[0]
        conn.close()
        assert stamp == "2026-01-02T01:04:05.000Z"

        status = json.loads(run_cli(tmp_path, "--config", str(config), "status", "--json",
                                    check=True).stdout)
        assert status["daemon"]["running"] is True and status["daemon"]["pid"] == proc.pid

        # A root that appears after start-up is followed without a restart.
        late_root = tmp_path / "agents" / "late-codex"
        assert not late_root.exists()
    finally:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0, (tmp_path / "run.log").read_text()
    assert time.monotonic() - started < 5


def test_root_created_after_start_is_followed(tmp_path: Path) -> None:
    """An agent installed after memoryd started is picked up without a restart."""
    roots = {"claude": tmp_path / "not-yet" / "projects"}
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.3s")
    with (tmp_path / "run.log").open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(state, proc.pid)
        project = roots["claude"] / "-tmp-x"
        project.mkdir(parents=True)
        line = {"type": "user", "uuid": "late-1", "message": {"role": "user", "content": "hi"}}
        (project / "late.jsonl").write_text(json.dumps(line) + "\n")
        wait_for(lambda: (state / "memoryd.db").exists() and _count(
            state / "memoryd.db", "SELECT COUNT(*) FROM session_messages WHERE uuid = 'late-1'"
        ) == 1)
        # And after the watch is set up, appends arrive through notifications too.
        more = {"type": "assistant", "uuid": "late-2",
                "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}}
        with (project / "late.jsonl").open("a") as handle:
            handle.write(json.dumps(more) + "\n")
        wait_for(lambda: _count(state / "memoryd.db",
                                 "SELECT COUNT(*) FROM session_messages") == 2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def test_state_dir_and_database_are_private(setup: tuple[Path, Path, dict[str, Path]],
                                            tmp_path: Path) -> None:
    """The state directory is 0700 and the database files 0600."""
    config, state, _roots = setup
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    assert state.stat().st_mode & 0o777 == 0o700
    for name in ("memoryd.db", "memoryd.db-wal", "memoryd.db-shm"):
        path = state / name
        if path.exists():
            assert path.stat().st_mode & 0o777 == 0o600, name


POMODORO = "yoavf+ai-sessions__examples__claude-code-pomodoro-timer.jsonl"


def _uuid_of_message_containing(transcript: Path, phrase: str) -> str:
    for line in transcript.read_text().splitlines():
        record = json.loads(line)
        content = record.get("message", {}).get("content")
        if record.get("type") == "user" and isinstance(content, str) and phrase in content:
            return str(record["uuid"])
    raise AssertionError(f"{phrase!r} not in {transcript}")


def test_transcript_reaches_recall_once_quiet(tmp_path: Path) -> None:
    """A transcript copied into a watched root is recalled, with provenance, once quiet."""
    from helpers import TRANSCRIPTS

    roots = {"claude": tmp_path / "agents" / "claude"}
    project = roots["claude"] / "-Users-yoav-pomodoro"
    project.mkdir(parents=True)
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.3s",
                          sync_delay="1s", sync_check_interval="0.3s")
    with (tmp_path / "run.log").open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(state, proc.pid)
        source = TRANSCRIPTS / "claude" / POMODORO
        (project / "b9f0c1d2.jsonl").write_bytes(source.read_bytes())

        def all_synced() -> bool:
            listed = json.loads(run_cli(tmp_path, "--config", str(config), "sessions",
                                        "--json", check=True).stdout)
            return bool(listed) and all(s["unsynced_messages"] == 0 and s["message_count"] > 0
                                        for s in listed)

        wait_for(all_synced, timeout=30)
        found = json.loads(run_cli(tmp_path, "--config", str(config), "recall",
                                   "smooth transitions between states", "--json",
                                   check=True).stdout)
        # One session, once, with its best evidence: messages that say it.
        [hit] = found
        assert "smooth transition" in hit["excerpt"] and hit["type"] == "conversation"
        conn = sqlite3.connect(state / "memoryd.db")
        said = dict(conn.execute("SELECT uuid, message_index FROM session_messages"
                                 " WHERE content LIKE '%smooth transition%'").fetchall())
        conn.close()
        shown = [u for u in hit["provenance"]["message_uuids"] if u in said]
        assert shown and all(hit["provenance"]["first_index"] <= said[u]
                             <= hit["provenance"]["last_index"] for u in shown)

        lines = run_cli(tmp_path, "--config", str(config), "recall", "--json", "--stdin",
                        check=False)
        assert lines.returncode != 0 or lines.stdout == ""
        batch = subprocess.run(
            memoryd_command("--config", str(config), "recall", "--json", "--stdin"),
            env=daemon_env(tmp_path), input="pomodoro timer\nsmooth transitions\n",
            capture_output=True, text=True, check=True)
        answers = [json.loads(line) for line in batch.stdout.splitlines()]
        assert len(answers) == 2 and all(answers)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def test_sync_command_saves_everything_now(setup: tuple[Path, Path, dict[str, Path]],
                                           tmp_path: Path) -> None:
    """`memoryd sync` saves every stored message to memory without waiting."""
    config, _state, _roots = setup
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    before = json.loads(run_cli(tmp_path, "--config", str(config), "status", "--json",
                                check=True).stdout)
    assert before["unsynced_messages"] > 0
    result = run_cli(tmp_path, "--config", str(config), "sync", check=True)
    assert "saved" in result.stdout
    after = json.loads(run_cli(tmp_path, "--config", str(config), "status", "--json",
                               check=True).stdout)
    assert after["unsynced_messages"] == 0
    missing = run_cli(tmp_path, "--config", str(config), "sync", "no-such-session")
    assert missing.returncode == 66


def test_status_shows_the_embedding_backlog(setup: tuple[Path, Path, dict[str, Path]],
                                            tmp_path: Path) -> None:
    """With an embedder configured, status names it and counts the chunks still waiting for
    a vector; without one it says recall is keyword-only. (The endpoint is never called:
    counting needs no vectors.)"""
    _config, state, roots = setup
    keywords = write_config(tmp_path / "keywords.yaml", state, roots,
                            memory={"embeddings": {"provider": "none"}})
    run_cli(tmp_path, "--config", str(keywords), "ingest", "--once", check=True)
    run_cli(tmp_path, "--config", str(keywords), "sync", check=True)
    status = json.loads(run_cli(tmp_path, "--config", str(keywords), "status", "--json",
                                check=True).stdout)
    assert status["memory"]["embedder"] is None
    assert status["memory"]["chunks_waiting_for_vector"] == 0
    text = run_cli(tmp_path, "--config", str(keywords), "status", check=True).stdout
    assert "vectors: none (keyword recall only)" in text

    remote = write_config(tmp_path / "remote.yaml", state, roots, memory={"embeddings": {
        "provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1"}}})
    status = json.loads(run_cli(tmp_path, "--config", str(remote), "status", "--json",
                                check=True).stdout)
    chunks = _count(state / "memory.db", "SELECT COUNT(*) FROM memory_chunks")
    assert chunks > 0
    assert status["memory"]["embedder"] == "openai:text-embedding-3-small:512"
    assert status["memory"]["chunks_waiting_for_vector"] == chunks
    text = run_cli(tmp_path, "--config", str(remote), "status", check=True).stdout
    assert f"vectors: openai:text-embedding-3-small:512, {chunks} chunks waiting for one" in text


def test_recall_rejects_bad_times(tmp_path: Path) -> None:
    """An unreadable --since is a usage error naming the accepted forms."""
    result = run_cli(tmp_path, "recall", "x", "--since", "whenever")
    assert result.returncode == 2
    assert "ISO date" in result.stderr


def test_ingest_loads_only_what_ingestion_needs(tmp_path: Path) -> None:
    """`memoryd ingest` stores transcripts without importing the memory backends, the
    embedders, HTTP or the scheduler: their import time is most of a small backfill's."""
    roots = lay_out_fixtures(tmp_path / "roots")
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", roots)
    heavy = ("numpy", "httpx", "apscheduler", "memoryd.service", "memoryd.memory.opening",
             "memoryd.memory.backends.sqlite", "memoryd.memory.embeddings")
    probe = ("import sys\nfrom memoryd.entry import main\n"
             f"sys.argv = ['memoryd', '--config', {str(config)!r}, 'ingest', '--once']\n"
             "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env=daemon_env(tmp_path))
    assert done.returncode == 0, done.stderr
    stored, loaded = done.stdout.strip().splitlines()
    assert stored.startswith("stored ") and not stored.startswith("stored 0 ")
    assert loaded == "[]"


def test_a_closed_pipe_ends_a_command_quietly(tmp_path: Path) -> None:
    """`memoryd show S | head -1`, `export | head -1`: the reader leaves early; the command
    ends with status 0 and says nothing (issue 36.5)."""
    import shlex

    from helpers import daemon_env, memoryd_command, write_config

    root = tmp_path / "claude" / "-p"
    root.mkdir(parents=True)
    lines = "".join(json.dumps({"type": "user", "uuid": f"u{i}", "sessionId": "pipe",
                                "timestamp": "2026-05-01T10:00:00Z",
                                "message": {"role": "user", "content": f"line {i} " + "x" * 200}})
                    + "\n" for i in range(3000))
    (root / "pipe.jsonl").write_text(lines)
    config = write_config(tmp_path / "c.yaml", tmp_path / "state",
                          {"claude": tmp_path / "claude"})
    env = daemon_env(tmp_path)
    for setup in (["ingest", "--once"], ["sync"]):
        assert subprocess.run(memoryd_command("--config", str(config), *setup), env=env,
                              capture_output=True, timeout=120).returncode == 0
    for args in (["show", "pipe"], ["show", "pipe", "--view", "model"], ["export"]):
        command = shlex.join(memoryd_command("--config", str(config), *args))
        done = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -1"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.returncode, done.stderr)
        assert done.stderr == "", (args, done.stderr)


@pytest.mark.parametrize("args", [["nosuchcommand"], ["show"], ["forget", "--bogus"],
                                  ["recall", "x", "--limit", "many"]])
def test_a_usage_error_is_one_line_naming_the_help(tmp_path: Path, args: list[str]) -> None:
    """click's four lines (Usage / Try / blank / Error) become one, with the help to read
    (issue 36.7); the status stays 2."""
    result = run_cli(tmp_path, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memoryd: "), result.stderr
    assert "--help" in lines[0] and "Usage:" not in result.stderr


def test_show_prints_the_sessions_title(tmp_path: Path) -> None:
    """Issue 36.9: the agent's own summary line is the session's title in `show`."""
    project = tmp_path / "claude" / "-p"
    project.mkdir(parents=True)
    (project / "s.jsonl").write_text(
        json.dumps({"type": "summary", "summary": "Fix the login redirect loop",
                    "leafUuid": "u1"}) + "\n"
        + json.dumps({"type": "user", "uuid": "u1", "sessionId": "s", "cwd": "/p",
                      "timestamp": "2026-11-20T10:00:00.000Z",
                      "message": {"role": "user", "content": "the login loops"}}) + "\n")
    config = write_config(tmp_path / "c.yaml", tmp_path / "state",
                          {"claude": tmp_path / "claude"})
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    shown = run_cli(tmp_path, "--config", str(config), "show", "s", check=True)
    assert "title:      Fix the login redirect loop" in shown.stdout.splitlines()


def test_sessions_without_messages_do_not_sort_first(tmp_path: Path) -> None:
    """Issue 36.9: newest first means newest conversation first; a file of headers only,
    found a moment ago, comes after every session that holds messages."""
    project = tmp_path / "claude" / "-p"
    project.mkdir(parents=True)
    (project / "talk.jsonl").write_text(json.dumps({
        "type": "user", "uuid": "u1", "sessionId": "talk", "cwd": "/p",
        "timestamp": "2026-11-20T10:00:00.000Z",
        "message": {"role": "user", "content": "hello"}}) + "\n")
    (project / "empty.jsonl").write_text(json.dumps({
        "type": "summary", "summary": "nothing yet", "leafUuid": "x"}) + "\n")
    config = write_config(tmp_path / "c.yaml", tmp_path / "state",
                          {"claude": tmp_path / "claude"})
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    listed = json.loads(run_cli(tmp_path, "--config", str(config), "sessions", "--json",
                                check=True).stdout)
    assert [s["message_count"] > 0 for s in listed] == [True, False]


def test_recall_by_type_finds_a_digest_with_the_agents_title(tmp_path: Path) -> None:
    """Issue 31.1, 31.3: `memoryd recall --type session_digest` returns digests only, and a
    digest carries the agent's own title of its session."""
    project = tmp_path / "claude" / "-p"
    project.mkdir(parents=True)
    (project / "s.jsonl").write_text(
        json.dumps({"type": "summary", "summary": "Fix the login redirect loop",
                    "leafUuid": "u1"}) + "\n"
        + json.dumps({"type": "user", "uuid": "u1", "sessionId": "s", "cwd": "/p",
                      "timestamp": "2026-11-20T10:00:00.000Z",
                      "message": {"role": "user", "content": "the login page loops"}}) + "\n")
    config = write_config(tmp_path / "c.yaml", tmp_path / "state",
                          {"claude": tmp_path / "claude"})
    for args in (("ingest", "--once"), ("sync",)):
        run_cli(tmp_path, "--config", str(config), *args, check=True)
    found = json.loads(run_cli(tmp_path, "--config", str(config), "recall", "login",
                               "--all-projects", "--type", "session_digest", "--json",
                               check=True).stdout)
    assert [r["type"] for r in found] == ["session_digest"]
    assert "Title: Fix the login redirect loop" in found[0]["content"]
    everything = json.loads(run_cli(tmp_path, "--config", str(config), "recall", "login",
                                    "--all-projects", "--json", check=True).stdout)
    # Ranked by words, the session comes back once, counting its digest and segment.
    assert len(everything) == 1 and everything[0]["session_matches"] >= 2


def test_a_last_line_without_its_newline_is_named_as_held_back(tmp_path: Path) -> None:
    """Issue 36.10: status said "264 B not yet stored" for ever for a file ending in a
    complete record without a newline, and the viewer said 0 B for every source. The
    file and the reason are named; status and the viewer count lag per agent alike."""
    import os

    root = tmp_path / "agents" / "claude"
    transcript = root / "-home-user-project" / "held.jsonl"
    transcript.parent.mkdir(parents=True)
    line = {"type": "user", "uuid": "u-1", "timestamp": "2026-01-02T03:04:05Z",
            "sessionId": "held", "cwd": "/home/user/project",
            "message": {"role": "user", "content": "stored"}}
    tail = json.dumps({**line, "uuid": "u-2", "message": {"role": "user",
                                                          "content": "held back"}})
    transcript.write_text(json.dumps(line) + "\n" + tail)
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", {"claude": root})
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    status = json.loads(run_cli(tmp_path, "--config", str(config), "status", "--json",
                                check=True).stdout)
    assert status["ingestion_held_back"] == []  # just written: an agent may be mid-line
    old = time.time() - 60
    os.utime(transcript, (old, old))
    status = json.loads(run_cli(tmp_path, "--config", str(config), "status", "--json",
                                check=True).stdout)
    assert status["ingestion_lag_by_source"] == {"claude": len(tail)}
    assert status["ingestion_held_back"] == [{
        "path": str(transcript), "bytes": len(tail),
        "reason": "a partial last line (no newline at its end)"}]
    text = run_cli(tmp_path, "--config", str(config), "status", check=True).stdout
    assert f"held back: a partial last line (no newline at its end) in {transcript}" in text


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN],
                         ids=["default", "ignored"])
def test_ctrl_c_during_ingest_leaves_the_bar_and_exits_130(
        tmp_path: Path, inherited: signal.Handlers) -> None:
    """Issue 36.6: Ctrl-C during `ingest --once` jumped the bar to 100 % and printed
    "Aborted!" with status 1. At a terminal (a pty), the bar stays where it stopped, one
    line says what was kept, and the status is 130: also when SIGINT was inherited
    ignored (a job a script started with `&`; issue 61.14)."""
    import os
    import pty
    import select

    root = tmp_path / "agents" / "claude"
    # About 100 MB: seconds of work on any machine, so the interrupt lands mid-pass.
    for f in range(120):
        folder = root / f"-home-user-p{f}"
        folder.mkdir(parents=True)
        (folder / f"s{f}.jsonl").write_text("".join(
            json.dumps({"type": "user", "uuid": f"u-{f}-{i}", "sessionId": f"s{f}",
                        "timestamp": "2026-01-02T03:04:05Z", "cwd": f"/home/user/p{f}",
                        "message": {"role": "user", "content": f"line {i} " + "x" * 300}})
            + "\n" for i in range(2500)))
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", {"claude": root})
    leader, follower = pty.openpty()
    # As at a terminal: SIGINT at its default; or as a job started with `&` by a script
    # (CI may be one) inherits it: ignored.
    proc = subprocess.Popen(memoryd_command("--config", str(config), "ingest", "--once"),
                            env=daemon_env(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=follower, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, inherited))
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    # The bar's label is drawn as the pass begins: interrupt then, however fast the pass.
    while b"ingesting" not in seen:
        assert time.monotonic() < deadline and proc.poll() is None, seen
        if select.select([leader], [], [], 0.2)[0]:
            seen += os.read(leader, 4096)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 130
    while select.select([leader], [], [], 0.5)[0]:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    text = seen.decode(errors="replace")
    assert "100%" not in text, text
    assert "Aborted" not in text and "interrupted; everything stored before this was kept" in text


def test_a_read_only_state_directory_is_one_sentence_and_73_everywhere(
        tmp_path: Path) -> None:
    """Issue 36.4: a read-only state directory gave exit 1 and a raw OSError from `run` and
    `ingest --once`, 69 from recall and remember, and a database error from status. A
    read-only bind mount (root ignores permission bits) in a mount namespace of its own."""
    import os
    import shlex
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a read-only mount")
    root = tmp_path / "agents" / "claude"
    (root / "-p").mkdir(parents=True)
    (root / "-p" / "s1.jsonl").write_text(json.dumps({
        "type": "user", "uuid": "u1", "sessionId": "s1", "timestamp": "2026-01-02T03:04:05Z",
        "cwd": "/p", "message": {"role": "user", "content": "hello there"}}) + "\n")
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, {"claude": root})
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    commands = [["ingest", "--once"], ["status"], ["sessions"], ["recall", "hello"],
                ["remember", "a fact"], ["sync"], ["run"]]
    script = [f"mount --bind {shlex.quote(str(state))} {shlex.quote(str(state))}",
              f"mount -o remount,bind,ro {shlex.quote(str(state))}"]
    for command in commands:
        line = shlex.join(memoryd_command("--config", str(config), *command))
        script.append(f"timeout 30 {line} > /dev/null 2> {tmp_path / command[0]}.err;"
                      f" echo $? > {tmp_path / command[0]}.status")
    done = subprocess.run(["unshare", "-m", "sh", "-c", " && ".join(script[:2]) + "; "
                           + "; ".join(script[2:])], env=daemon_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for command in commands:
        status = (tmp_path / f"{command[0]}.status").read_text().strip()
        said = (tmp_path / f"{command[0]}.err").read_text()
        assert status == "73", (command, status, said)
        assert said.count("\n") == 1 and "read-only file system" in said, (command, said)
        assert str(state) in said and "Traceback" not in said


def test_output_fits_an_80_column_terminal(setup: tuple[Path, Path, dict[str, Path]],
                                           tmp_path: Path) -> None:
    """Issue 36.8: `sessions` was 126 columns wide, `show` 252, `audit` 190, `doctor` 106;
    `show --view model` printed a slash-command prompt as about 80 lines. At 80 columns
    every line fits (long values cut with …, whole in --json), and the model view is one
    line per message."""
    config, _state, _roots = setup
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    run_cli(tmp_path, "--config", str(config), "sync", check=True)
    rows = json.loads(run_cli(tmp_path, "--config", str(config), "sessions", "--json",
                              check=True).stdout)
    longest = max(rows, key=lambda r: r["message_count"])
    env = {**daemon_env(tmp_path), "COLUMNS": "80"}

    def lines(*args: str) -> list[str]:
        done = subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 1), done.stderr
        return done.stdout.splitlines()

    for args in (["sessions"], ["status"], ["audit"], ["doctor"],
                 ["show", str(longest["id"])], ["show", str(longest["id"]), "--view", "model"]):
        wide = [line for line in lines(*args) if len(line) > 80]
        assert wide == [], (args, wide[:3])
    model = lines("show", str(longest["id"]), "--view", "model")
    assert 0 < len(model) <= longest["message_count"]
    assert any("…" in line for line in lines("sessions") + lines("audit"))


def test_commands_print_no_log_records_unless_asked(setup: tuple[Path, Path, dict[str, Path]],
                                                    tmp_path: Path) -> None:
    """Issue 34.1: `recall`, `ingest --once`, `sync` and `remember` printed JSON log records
    on stderr beside their answers. A one-off command's stderr holds only sentences for a
    person; `--verbose` shows its records as text, `--log-format json` as JSON."""
    config, _state, _roots = setup

    def stderr_of(*args: str) -> str:
        done = run_cli(tmp_path, "--config", str(config), *args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stderr

    said = "".join(stderr_of(*args) for args in (
        ["ingest", "--once"], ["sync"], ["recall", "refunds", "--limit", "1"],
        ["remember", "the deploy lane is blue"], ["status"], ["sessions"],
        ["context", "--query", "deploy"], ["export"]))
    doctor = run_cli(tmp_path, "--config", str(config), "doctor")
    assert doctor.returncode in (0, 1), doctor.stderr
    said += doctor.stderr
    records = [line for line in said.splitlines()
               if line.lstrip().startswith("{") or "[info" in line or "[warning" in line]
    assert records == [], records[:3]
    verbose = stderr_of("--verbose", "remember", "the deploy lane is green")
    assert "memory_remembered" in verbose and not verbose.lstrip().startswith("{")
    machine = stderr_of("--log-format", "json", "remember", "the deploy lane is red")
    assert json.loads(machine.splitlines()[-1])["event"] == "memory_remembered"


def test_statuses_are_true_without_the_daemon(tmp_path: Path) -> None:
    """Issue 34.2: only the running daemon's lifecycle job paused quiet sessions, so without
    it `sessions` called a session quiet for months `active`. Shown statuses are what that
    check would make of them now: in `sessions` (and its filter), `status` and `show`."""
    roots = lay_out_fixtures(tmp_path / "agents")
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", roots,
                          stale_session_timeout="1s")
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    time.sleep(1.5)
    rows = json.loads(run_cli(tmp_path, "--config", str(config), "sessions", "--json",
                              check=True).stdout)
    assert rows and {r["status"] for r in rows} <= {"paused", "ended"}
    stored = _count(tmp_path / "state" / "memoryd.db",
                    "SELECT COUNT(*) FROM sessions WHERE status = 'active'")
    assert stored > 0  # no daemon ran: the store still says active, the commands do not
    active = json.loads(run_cli(tmp_path, "--config", str(config), "sessions", "--status",
                                "active", "--json", check=True).stdout)
    paused = json.loads(run_cli(tmp_path, "--config", str(config), "sessions", "--status",
                                "paused", "--all", "--json", check=True).stdout)
    assert active == [] and len(paused) >= stored
    status = json.loads(run_cli(tmp_path, "--config", str(config), "status", "--json",
                                check=True).stdout)
    assert "active" not in status["sessions_by_status"]
    shown = json.loads(run_cli(tmp_path, "--config", str(config), "show", str(paused[0]["id"]),
                               "--json", check=True).stdout)
    assert shown["status"] == "paused"


def test_subagents_are_shown_under_their_parent(setup: tuple[Path, Path, dict[str, Path]],
                                                tmp_path: Path) -> None:
    """Issue 34.3: subagent transcripts were listed as sessions of their own beside their
    parent. By default they are counted on it (SUB); `--all` lists them flat; `show` of
    the parent names them."""
    config, state, _roots = setup
    run_cli(tmp_path, "--config", str(config), "ingest", "--once", check=True)
    children = _count(state / "memoryd.db",
                      "SELECT COUNT(*) FROM sessions WHERE parent_session_id IS NOT NULL")
    assert children > 0  # the real fixtures hold Claude subagents
    flat = json.loads(run_cli(tmp_path, "--config", str(config), "sessions", "--all",
                              "--json", check=True).stdout)
    nested = json.loads(run_cli(tmp_path, "--config", str(config), "sessions", "--json",
                                check=True).stdout)
    assert len(nested) == len(flat) - children
    assert all(row["parent_session_id"] is None for row in nested)
    parent = max(nested, key=lambda r: r["subagents"])
    assert sum(r["subagents"] for r in nested) == children and parent["subagents"] > 0
    text = run_cli(tmp_path, "--config", str(config), "sessions", check=True).stdout
    assert " SUB " in text.splitlines()[0]
    shown = json.loads(run_cli(tmp_path, "--config", str(config), "show", str(parent["id"]),
                               "--json", check=True).stdout)
    assert len(shown["subagents"]) == parent["subagents"]
    said = run_cli(tmp_path, "--config", str(config), "show", str(parent["id"]),
                   check=True).stdout
    assert f"subagents:  {parent['subagents']} (" in said
