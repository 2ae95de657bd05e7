"""`memoryd forget --everything-about USER` through the real CLI (issue 16.2): every layer's
memories and vectors, the outbox's waiting saves and the archive's text are gone for good,
with a report and an audit record without content; another user's memories in a shared
PostgreSQL are theirs to lose alone; a legal hold refuses it."""

from __future__ import annotations

import getpass
import json
import sqlite3
import subprocess
from pathlib import Path

from helpers import daemon_env, memoryd_command, write_config

from tests.pg import new_database

SECRET = "the zebra vault code is kept in the blue binder"


def _cli(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          capture_output=True, text=True, timeout=120)


def _transcript(root: Path) -> Path:
    project = root / "-work-app"
    project.mkdir(parents=True)
    path = project / "s1.jsonl"
    path.write_text("".join(json.dumps({
        "type": kind, "uuid": f"u{i}", "sessionId": "s1", "cwd": "/work/app",
        "timestamp": f"2026-03-02T10:0{i}:00Z",
        "message": {"role": kind, "content": f"{SECRET}, turn {i}"}}) + "\n"
        for i, kind in enumerate(["user", "assistant", "user"])) + "not json at all\n")
    return path


def test_everything_about_this_user_is_deleted_everywhere(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    transcript = _transcript(root)
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {"claude": root})
    env = daemon_env(tmp_path)
    for args in (("ingest", "--once"), ("sync",), ("remember", "zebra facts are explicit")):
        assert _cli(config, env, *args).returncode == 0
    assert "zebra" in _cli(config, env, "recall", "zebra vault").stdout

    me = getpass.getuser()
    unconfirmed = _cli(config, env, "forget", "--everything-about", me)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    assert _cli(config, env, "hold", "add", "--project", "/work/app").returncode == 0
    refused = _cli(config, env, "forget", "--everything-about", me, "--yes")
    assert refused.returncode == 1 and "legal holds stand" in refused.stderr
    assert _cli(config, env, "hold", "release", "1").returncode == 0

    done = _cli(config, env, "forget", "--everything-about", me, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"everything about {me}: " in done.stdout
    assert "the text of 3 messages" in done.stdout and "1 rejected lines" in done.stdout

    assert _cli(config, env, "recall", "zebra vault", "--json").stdout.strip() == "[]"
    assert _cli(config, env, "export").stdout.strip() == ""
    assert "zebra" not in _cli(config, env, "show", "s1").stdout
    for db in ("memoryd.db", "memory.db"):
        conn = sqlite3.connect(state / db)
        try:
            dump = "\n".join(conn.iterdump())
        finally:
            conn.close()
        assert "zebra vault" not in dump, db  # no text left, vectors and FTS included
    # Reading the transcript again (a replaced file) stores and saves nothing again.
    transcript.write_bytes(transcript.read_bytes())
    for args in (("ingest", "--once"), ("sync",)):
        assert _cli(config, env, *args).returncode == 0
    assert "zebra" not in _cli(config, env, "recall", "zebra vault").stdout
    trail = json.loads(_cli(config, env, "audit", "--json").stdout)
    refused_event, event = [e for e in trail if e["action"] == "forget_user"]
    assert refused_event["outcome"] == "failed" and "legal holds" in refused_event["detail"]
    assert event["outcome"] == "ok" and event["count"] >= 2
    assert "zebra" not in json.dumps(trail)


def test_another_users_memories_in_a_shared_postgres_are_theirs_alone(
        tmp_path: Path) -> None:
    env = daemon_env(tmp_path)
    env["MEMORYD_POSTGRES_DSN"] = new_database()

    def config_for(user: str) -> Path:
        return write_config(tmp_path / f"{user}.yaml", tmp_path / f"state-{user}", {},
                            memory={"backends": ["postgres"], "postgres": {"user": user}})

    alice, bob = config_for("alice"), config_for("bob")
    assert _cli(alice, env, "remember", "alice keeps the zebra keys").returncode == 0
    assert _cli(bob, env, "remember", "bob keeps the zebra maps").returncode == 0
    done = _cli(bob, env, "forget", "--everything-about", "alice", "--yes")
    assert done.returncode == 0, done.stderr
    assert "1 memory versions deleted" in done.stdout
    assert "not theirs" in done.stdout  # bob's own archive is untouched
    assert _cli(alice, env, "export").stdout.strip() == ""
    assert "zebra maps" in _cli(bob, env, "export").stdout
