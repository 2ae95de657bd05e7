"""The audit trail through every interface, with a real daemon and without one: who read or
changed which memory, when and through what; never the memory's text, a query or a key."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from helpers import wait_for

from tests.integration.test_agents import PROJECT, Daemon, claude_line, claude_payload, daemon

__all__ = ["daemon"]  # the fixture, shared with test_agents

SECRET_TEXT = "the staging database password rotates every fortnight"


def events(d: Daemon, *args: str) -> list[dict[str, object]]:
    done = d.cli("audit", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_every_interface_is_recorded_and_no_content_is(daemon: Daemon) -> None:
    d = daemon
    # Without a daemon: the CLI opens the stores itself, and says so in the trail too.
    made = d.cli("remember", SECRET_TEXT, "--project", PROJECT, "--json")
    assert made.returncode == 0, made.stderr
    memory_id = json.loads(made.stdout)["id"]
    assert d.cli("recall", "staging password", "--json").returncode == 0
    d.start()
    try:
        # With the daemon: the CLI through the API, a hook, the API itself.
        assert d.cli("recall", "fortnight", "--json").returncode == 0
        fixed = d.cli("correct", memory_id, "the staging password rotates monthly")
        assert fixed.returncode == 0, fixed.stderr
        new_id = fixed.stdout.split()[-1]
        hooked = d.hook("claude", "UserPromptSubmit", claude_payload(
            "UserPromptSubmit", "agent-session-1", prompt="when does the staging password"
            " rotate?"))
        assert hooked.returncode == 0
        assert d.api("recall", {"query": "monthly"}).status_code == 200
        assert d.api("get_memory", {"memory_id": "nope"}).status_code == 404
        # The daemon's own saves.
        transcript = d.claude_root / "-p" / "s1.jsonl"
        transcript.parent.mkdir(parents=True, exist_ok=True)
        when = datetime(2026, 1, 2, 10, 0, tzinfo=UTC)
        transcript.write_text(claude_line("s1", "u1", "user", "we picked blue green", when)
                              + claude_line("s1", "u2", "assistant", "noted", when))

        def stored() -> bool:  # `sync` saves what the daemon has read (within 2 s)
            with sqlite3.connect(d.state / "memoryd.db") as db:
                return db.execute("SELECT count(*) FROM session_messages").fetchone()[0] == 2

        wait_for(stored, what="the transcript read")
        assert d.cli("sync").returncode == 0
        forgotten = d.cli("forget", new_id)
        assert forgotten.returncode == 0, forgotten.stderr
    finally:
        d.stop()
    assert d.cli("export").returncode == 0

    trail = events(d)
    seen = {(e["interface"], e["action"], e["outcome"]) for e in trail}
    for expected in [("cli", "remember", "ok"), ("cli", "recall", "ok"),
                     ("cli", "correct", "ok"), ("cli", "forget", "ok"),
                     ("hook", "session_event:prompt", "ok"), ("api", "recall", "ok"),
                     ("api", "get_memory", "failed"), ("cli", "export", "ok")]:
        assert expected in seen, (expected, seen)
    assert any(e["interface"] == "daemon" and e["action"] == "save_segment" for e in trail), seen
    hook = next(e for e in trail if e["interface"] == "hook")
    assert hook["agent"] == "claude" and hook["agent_session_id"] == "agent-session-1"
    assert new_id in hook["memory_ids"]  # what the hook gave the agent
    # One memory's history: made, read, corrected, read again, forgotten.
    about = events(d, "--memory", memory_id)
    assert [e["action"] for e in about][:1] == ["remember"]
    assert "correct" in [e["action"] for e in about]
    assert any(e["action"] == "forget" for e in events(d, "--memory", new_id))
    # Never content: not in the trail, not in its table.
    raw = json.dumps(trail)
    for text in (SECRET_TEXT, "fortnight", "rotates monthly", "blue green", "staging password"):
        assert text not in raw
    conn = sqlite3.connect(d.state / "memoryd.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    table = [line for line in dump.splitlines() if "audit_events" in line]
    assert table and not any("fortnight" in line or "monthly" in line for line in table)
    readable = d.cli("audit", "--memory", memory_id)
    assert readable.returncode == 0 and "remember" in readable.stdout


def test_old_events_expire_and_since_filters(daemon: Daemon) -> None:
    from memoryd.config import load_settings
    from memoryd.store import audit
    from memoryd.store.database import open_store

    d = daemon
    settings = load_settings(d.config)

    async def seed() -> int:
        async with open_store(settings) as conn:
            old = datetime.now(UTC) - timedelta(days=400)
            await audit.record(conn, audit.AuditEvent("cli", "recall", memory_ids=("m-old",)),
                               old)
            await audit.record(conn, audit.AuditEvent("cli", "recall", memory_ids=("m-new",)),
                               datetime.now(UTC))
            return await audit.expire(conn, datetime.now(UTC) - timedelta(
                seconds=settings.audit_retention))

    assert asyncio.run(seed()) == 1
    assert [e["memory_ids"] for e in events(d)] == [["m-new"]]
    assert events(d, "--memory", "m-old") == []
    assert events(d, "--since", "2099-01-01") == []
    bad = d.cli("audit", "--since", "not a time")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_the_audit_command_on_a_fresh_state_dir(tmp_path: Path) -> None:
    import subprocess

    from helpers import daemon_env, memoryd_command, write_config

    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {})
    done = subprocess.run(memoryd_command("--config", str(config), "audit"),
                          env=daemon_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "no audit events" in done.stdout


def test_caller_supplied_strings_are_masked_and_bounded(daemon: Daemon) -> None:
    """A token passed as a memory id or a hook's session id never reaches the trail as
    written; a huge one is bounded (issue 29.7)."""
    token = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    daemon.start()
    try:
        assert daemon.api("get_memory", {"memory_id": token}).status_code == 404
        assert daemon.api("forget", {"memory_id": token}).status_code == 200
        assert daemon.api("get_memory", {"memory_id": "x" * 50_000}).status_code == 404
        hooked = daemon.hook("claude", "UserPromptSubmit", claude_payload(
            "UserPromptSubmit", token, prompt="anything"))
        assert hooked.returncode == 0
        assert daemon.api("session_event", {"agent": "claude", "event": "prompt",
                                            "session_id": "s" * 50_000,
                                            "prompt": "x"}).status_code == 200
    finally:
        daemon.stop()
    with sqlite3.connect(daemon.state / "memoryd.db") as conn:
        rows = conn.execute("SELECT * FROM audit_events").fetchall()
        ids = conn.execute("SELECT memory_id FROM audit_memory_ids").fetchall()
    dumped = json.dumps([list(r) for r in rows] + [list(r) for r in ids])
    assert token not in dumped and "ghp_aB3dE5" not in dumped
    assert "[REDACTED" in dumped
    assert max(len(str(v)) for row in rows for v in row) <= 600
    assert max(len(r[0]) for r in ids) <= 200


def test_a_batch_of_events_keeps_each_ones_memory_ids(tmp_path: Path) -> None:
    """Recovery records a batch's hundred events in one call (two statements, the ids
    read back from the events just written): every event keeps exactly its own ids, in
    order and once each, after events already there and before later ones."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from memoryd.config import load_settings
    from memoryd.store import audit
    from memoryd.store.connection import run_on_connection, transaction
    from memoryd.store.database import open_store

    state = load_settings(None, state_dir=str(tmp_path / "state"))
    ids = st.lists(st.sampled_from(["a", "b", "c", "ünï", '"q"', "x" * 40]), max_size=4)
    batches = st.lists(st.lists(ids, max_size=6), min_size=1, max_size=4)

    async def check(calls: list[list[list[str]]]) -> None:
        async with open_store(state) as conn:
            await conn.execute("DELETE FROM audit_events")
            await conn.execute("DELETE FROM audit_memory_ids")
            await conn.commit()
            expected: list[list[str]] = []
            for call in calls:
                async with transaction(conn):
                    await run_on_connection(conn, audit.insert_events, [
                        audit.AuditEvent("daemon", "save_segment", memory_ids=tuple(e))
                        for e in call], datetime.now(UTC))
                expected += [list(dict.fromkeys(e)) for e in call]
            rows = await conn.execute_fetchall(
                "SELECT e.id, m.memory_id FROM audit_events e"
                " LEFT JOIN audit_memory_ids m ON m.event_id = e.id ORDER BY e.id, m.rowid")
        linked: dict[int, list[str]] = {}
        for event_id, memory_id in rows:
            linked.setdefault(event_id, [])
            if memory_id is not None:
                linked[event_id].append(memory_id)
        assert list(linked.values()) == expected

    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(batches)
    def run(calls: list[list[list[str]]]) -> None:
        asyncio.run(check(calls))

    run()
