"""Every real fixture transcript ingests, with the message counts of issue 2 section 4.

The expected rows are derived here from the raw files with the standard library's
`json`, by the rules of section 4, independently of the parsers under test.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import lay_out_fixtures, sources_for

from memoryd.clock import FakeClock
from memoryd.config import load_settings
from memoryd.ingest.ingester import Ingester, PassStats
from memoryd.store import connect, migrate

#: Section 4: injected context that is not a user message in a Codex rollout.
CODEX_BOILERPLATE = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions")
CODEX_CALLS = ("function_call", "custom_tool_call")
CODEX_OUTPUTS = ("function_call_output", "custom_tool_call_output", "function_result")


@dataclass
class Ingested:
    roots: dict[str, Path]
    database: Path
    first: PassStats
    second: PassStats
    rows_after_first: int


def _run(roots: dict[str, Path], state_dir: Path) -> tuple[Path, PassStats, PassStats, int]:
    async def main() -> tuple[Path, PassStats, PassStats, int]:
        settings = load_settings(None, state_dir=str(state_dir), sources=sources_for(roots))
        conn = await connect(settings.database_path)
        try:
            await migrate(conn)
            ingester = Ingester(conn, settings, FakeClock())
            await ingester.load()
            first = await ingester.run_once()
            async with conn.execute("SELECT COUNT(*) FROM session_messages") as cursor:
                row = await cursor.fetchone()
            second = await ingester.run_once()
        finally:
            await conn.close()
        return settings.database_path, first, second, int(row[0]) if row else -1

    return asyncio.run(main())


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ingested]:
    """All fixtures laid out as the agents write them, ingested twice into one store."""
    base = tmp_path_factory.mktemp("fixtures")
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("MEMORYD_"):
                patch.delenv(name)
        patch.setenv("XDG_CONFIG_HOME", str(base / "xdg-config"))
        roots = lay_out_fixtures(base / "agents")
        database, first, second, rows = _run(roots, base / "state")
    yield Ingested(roots, database, first, second, rows)


@pytest.fixture
def db(ingested: Ingested) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(ingested.database)
    try:
        yield conn
    finally:
        conn.close()


# -- what section 4 says the files hold, read independently ---------------------------------


def _complete_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of every newline-terminated line; an unterminated tail waits."""
    data = path.read_bytes()
    offset = 0
    while (newline := data.find(b"\n", offset)) >= 0:
        yield offset, data[offset:newline]
        offset = newline + 1


def _records(path: Path) -> Iterator[tuple[int, bytes, Any]]:
    """(offset, raw, decoded) for every non-blank complete line; decoded is None if not JSON."""
    for offset, raw in _complete_lines(path):
        if not raw.strip():
            continue
        try:
            decoded = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            decoded = None
        yield offset, raw, decoded


def _claude_expected(record: dict[str, Any]) -> bool:
    kind = record.get("type")
    return kind in ("user", "assistant") or (
        kind == "system" and record.get("subtype") == "compact_boundary"
    )


def _codex_text(item: dict[str, Any]) -> str:
    content = item.get("content", item.get("message"))
    if isinstance(content, str):
        return content
    parts = [b.get("text") for b in content or [] if isinstance(b, dict)]
    return "\n".join(p for p in parts if isinstance(p, str))


def _codex_item_expected(item: dict[str, Any]) -> bool:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        return role == "assistant" or (
            role == "user" and not _codex_text(item).lstrip().startswith(CODEX_BOILERPLATE)
        )
    return kind in CODEX_CALLS or kind in CODEX_OUTPUTS


def _codex_expected(record: dict[str, Any]) -> bool:
    payload = record.get("payload")
    if isinstance(payload, dict):
        if record.get("type") == "compacted":
            return True
        return record.get("type") == "response_item" and _codex_item_expected(payload)
    # Before 0.44 response items were written without the envelope.
    kind = record.get("type")
    if kind is None and record.get("role") is None:
        return False
    return (kind is None or kind == "message" or kind in CODEX_CALLS + CODEX_OUTPUTS) and (
        _codex_item_expected(record)
    )


def _expected_count(kind: str, path: Path) -> int:
    if kind == "gemini" and path.suffix == ".json":
        document = json.loads(path.read_bytes())
        entries = document.get("messages", document.get("history"))
        ids = [e.get("id") or f"#{i}" for i, e in enumerate(entries) if isinstance(e, dict)]
        return len(set(ids))  # recognised by id: a repeated id is one message
    records = [r for _o, _raw, r in _records(path) if isinstance(r, dict)]
    if kind == "claude":
        return sum(map(_claude_expected, records))
    if kind == "codex":
        return sum(map(_codex_expected, records))
    # Gemini JSONL: message lines carry a type; the last copy of an id wins.
    return len({r.get("id") or f"#{i}" for i, r in enumerate(records) if "type" in r})


def _transcripts(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".jsonl", ".json")
                  and not p.name.endswith(".meta.json"))


def _session_of(db: sqlite3.Connection, path: Path) -> int:
    row = db.execute("SELECT session_id FROM session_message_state WHERE path = ?",
                     (str(path),)).fetchone()
    assert row is not None, f"{path} was not registered"
    return int(row[0])


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["claude", "codex", "gemini"])
def test_every_fixture_has_the_messages_of_section_4(
    ingested: Ingested, db: sqlite3.Connection, kind: str
) -> None:
    """Each fixture file is one session whose row count is what section 4 says its file holds."""
    files = _transcripts(ingested.roots[kind])
    assert files, f"no {kind} fixtures found"
    expected = {p.name: _expected_count(kind, p) for p in files}
    stored = {
        p.name: db.execute("SELECT COUNT(*) FROM session_messages WHERE session_id = ?",
                           (_session_of(db, p),)).fetchone()[0]
        for p in files
    }
    assert stored == expected
    assert sum(expected.values()) > 0


def test_message_indexes_are_dense(db: sqlite3.Connection) -> None:
    """Every session's message_index runs 0, 1, 2, ... and message_count agrees."""
    for session_id, count in db.execute("SELECT id, message_count FROM sessions"):
        indexes = [r[0] for r in db.execute(
            "SELECT message_index FROM session_messages WHERE session_id = ?"
            " ORDER BY message_index", (session_id,))]
        assert indexes == list(range(count)), session_id


def test_claude_rows_are_the_lines_in_order_and_raw(
    ingested: Ingested, db: sqlite3.Connection
) -> None:
    """Claude rows are the message lines, in file order, each with its exact raw bytes,
    its uuid and the byte offset of its line."""
    for path in _transcripts(ingested.roots["claude"]):
        expected = [(o, raw, r.get("uuid")) for o, raw, r in _records(path)
                    if isinstance(r, dict) and _claude_expected(r)]
        stored = db.execute(
            "SELECT byte_offset, raw, uuid FROM session_messages WHERE session_id = ?"
            " ORDER BY message_index", (_session_of(db, path),)).fetchall()
        as_bytes = [(o, raw if isinstance(raw, bytes) else raw.encode(), u) for o, raw, u in stored]
        assert as_bytes == expected, path.name


def test_subagent_files_are_child_sessions(ingested: Ingested, db: sqlite3.Connection) -> None:
    """A `<session>/subagents/agent-*.jsonl` file is its own session, linked to its parent."""
    subagents = [p for p in _transcripts(ingested.roots["claude"]) if p.parent.name == "subagents"]
    assert subagents
    for path in subagents:
        parent_file = path.parent.parent.with_suffix(".jsonl")
        child = _session_of(db, path)
        (parent_id,) = db.execute("SELECT parent_session_id FROM sessions WHERE id = ?",
                                  (child,)).fetchone()
        assert parent_id == _session_of(db, parent_file), path.name
        assert child != parent_id
    top_level = [p for p in _transcripts(ingested.roots["claude"]) if p.parent.name != "subagents"]
    for path in top_level:
        (parent_id,) = db.execute("SELECT parent_session_id FROM sessions WHERE id = ?",
                                  (_session_of(db, path),)).fetchone()
        assert parent_id is None, path.name


def test_inline_sidechain_lines_are_flagged(ingested: Ingested, db: sqlite3.Connection) -> None:
    """Inline isSidechain lines stay in their file's session and are flagged is_sidechain."""
    flagged_anywhere = 0
    for path in _transcripts(ingested.roots["claude"]):
        expected = {r["uuid"] for _o, _raw, r in _records(path)
                    if isinstance(r, dict) and _claude_expected(r) and r.get("isSidechain") is True}
        stored = {u for (u,) in db.execute(
            "SELECT uuid FROM session_messages WHERE session_id = ? AND is_sidechain = 1",
            (_session_of(db, path),))}
        assert stored == expected, path.name
        flagged_anywhere += len(expected)
    assert flagged_anywhere > 0


@pytest.mark.parametrize("kind", ["claude", "codex", "gemini"])
def test_lines_that_cannot_be_messages_are_rejected_lines(
    ingested: Ingested, db: sqlite3.Connection, kind: str
) -> None:
    """`//` comment lines and JSON that is not an object are kept in rejected_lines with their
    path, offset and raw bytes; nothing else is rejected."""
    files = [p for p in _transcripts(ingested.roots[kind]) if p.suffix == ".jsonl"]
    for path in files:
        expected = {(o, raw) for o, raw, r in _records(path) if not isinstance(r, dict)}
        stored = {(o, raw if isinstance(raw, bytes) else raw.encode()) for o, raw in db.execute(
            "SELECT byte_offset, raw FROM rejected_lines WHERE path = ?", (str(path),))}
        assert stored == expected, path.name


def test_the_fixtures_do_contain_rejectable_lines(ingested: Ingested) -> None:
    """The rejection test above is not vacuous: comment lines and non-objects exist."""
    bad = [raw for p in _transcripts(ingested.roots["claude"]) for _o, raw, r in _records(p)
           if not isinstance(r, dict)]
    assert any(raw.startswith(b"//") for raw in bad)
    assert any(raw.strip()[:1] in (b'"', b"[") or raw.strip().isdigit() for raw in bad)


def test_claude_summaries_are_kept(ingested: Ingested, db: sqlite3.Connection) -> None:
    """`summary` lines and compaction summaries are kept as the session's summaries."""
    seen = 0
    for path in _transcripts(ingested.roots["claude"]):
        expected = set()
        for _o, _raw, r in _records(path):
            if not isinstance(r, dict):
                continue
            if r.get("type") == "summary" and r.get("summary"):
                expected.add(r["summary"])
            if r.get("isCompactSummary") is True and isinstance(r["message"]["content"], str):
                expected.add(r["message"]["content"])
        stored = {c for (c,) in db.execute(
            "SELECT content FROM session_summaries WHERE session_id = ?",
            (_session_of(db, path),))}
        assert expected <= stored, path.name
        seen += len(expected)
    assert seen > 0


def test_codex_session_is_named_by_its_own_header(
    ingested: Ingested, db: sqlite3.Connection
) -> None:
    """A rollout's session takes the id of its first session_meta, not of later ones that
    belong to replayed or forked history."""
    checked = 0
    for path in _transcripts(ingested.roots["codex"]):
        metas = [r["payload"]["id"] for _o, _raw, r in _records(path) if isinstance(r, dict)
                 and r.get("type") == "session_meta" and r["payload"].get("id")]
        if not metas:
            continue
        (external_id,) = db.execute("SELECT external_id FROM sessions WHERE id = ?",
                                    (_session_of(db, path),)).fetchone()
        assert external_id == metas[0], path.name
        checked += len(set(metas)) > 1
    assert checked > 0  # some fixture does have several different session_meta ids


def test_timestamps_are_utc(db: sqlite3.Connection) -> None:
    """Every stored message timestamp is ISO-8601 UTC ending in Z."""
    stamps = [t for (t,) in db.execute("SELECT timestamp FROM session_messages")]
    assert stamps
    assert all(t is None or (t.endswith("Z") and "+" not in t) for t in stamps)
    assert sum(t is not None for t in stamps) > len(stamps) * 0.9


def test_second_pass_stores_nothing(ingested: Ingested, db: sqlite3.Connection) -> None:
    """A second full pass over unchanged files reads and stores nothing new."""
    assert ingested.first.messages == ingested.rows_after_first > 0
    assert ingested.second.messages == 0
    assert ingested.second.bytes_read == 0
    (rows,) = db.execute("SELECT COUNT(*) FROM session_messages").fetchone()
    assert rows == ingested.rows_after_first


def test_every_fixture_file_is_registered(ingested: Ingested, db: sqlite3.Connection) -> None:
    """No fixture failed to ingest: every transcript file has its file state and session."""
    files = [p for kind in ("claude", "codex", "gemini")
             for p in _transcripts(ingested.roots[kind])]
    registered = {Path(p) for (p,) in db.execute("SELECT path FROM session_message_state")}
    assert set(files) == registered
    (sessions,) = db.execute("SELECT COUNT(*) FROM sessions").fetchone()
    assert sessions == len(files)
