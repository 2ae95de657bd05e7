"""What a person had forgotten, by what identifies the content rather than the file.

Forgetting a session or a project (`memoryd forget`) tombstones its memories in
every layer, and the memory backends remember the session and project so that
what they bring later is never saved. A copy of the transcript under another
name is, to the ingester, a new session with a new id: only the content tells
it is the same. So the daemon's archive remembers here, at the moment of the
forget, each message's keys (`session_messages.dedupe_key`: the agent's own
message uuid, or a hash of the raw line where the agent writes none; and
`content_key`: a hash of what it says, so that the same records written again
under new ids, as a resumed Claude Code conversation or a Gemini `/chat resume`
writes them, are known too), each summary's text hash, and the session and
project themselves. Then:

- recovery never saves a message or summary whose key is forgotten, wherever
  it is read from (`messages_from` marks them, `summary_forgotten`);
- `search_sessions` never returns a message of a forgotten session (its
  subagents' sessions are forgotten with it), of a session of a forgotten project
  (or of everything forgotten) that began before the forget, or whose key is
  forgotten (`VISIBLE`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.connection import transaction
from memoryd.store.distill_queue import drop_forgotten
from memoryd.store.raw import clear_text

#: A message row `m` of session `s` that an agent may be shown (nothing forgotten).
VISIBLE = (
    "NOT EXISTS (SELECT 1 FROM forgotten_content f WHERE f.kind = 'message'"
    " AND f.value IN (m.dedupe_key, m.content_key))"
    " AND NOT EXISTS (SELECT 1 FROM forgotten_content f WHERE f.kind = 'session'"
    " AND f.value = CAST(s.id AS TEXT))"
    " AND NOT EXISTS (SELECT 1 FROM forgotten_content f WHERE f.kind = 'agent_session'"
    " AND f.value = s.external_id)"
    " AND NOT EXISTS (SELECT 1 FROM forgotten_content f WHERE f.kind = 'project'"
    " AND f.value = s.project"
    " AND julianday(COALESCE(s.started_at, f.forgotten_at)) <= julianday(f.forgotten_at))"
    " AND NOT EXISTS (SELECT 1 FROM forgotten_content f WHERE f.kind = 'everything'"
    " AND f.value = '*'"
    " AND julianday(COALESCE(s.started_at, f.forgotten_at)) <= julianday(f.forgotten_at))"
)

#: For a message row `m`: 1 when its content key is forgotten.
MESSAGE_FORGOTTEN = (
    "EXISTS (SELECT 1 FROM forgotten_content f WHERE f.kind = 'message'"
    " AND f.value IN (m.dedupe_key, m.content_key))"
)


def content_key(role: str, kind: str, content: str | None, tool_name: str | None,
                tool_input: str | None) -> str | None:
    """What a message says, whatever its uuid or session: its role, kind, text, tool and
    tool input hashed (`c:` keeps these apart from `dedupe_key`s); None when it says
    nothing. Identical words in another session ("ok") are forgotten with it: forgetting
    errs towards forgetting."""
    text = (content or "").strip()
    if not text and not tool_input:
        return None
    joined = "\x1f".join((role, kind, text, tool_name or "", tool_input or ""))
    return "c:" + hashlib.sha256(joined.encode("utf-8", "surrogatepass")).hexdigest()


#: A message row's content key, stored or (a row stored before the column) computed.
_CONTENT_KEY = "COALESCE(content_key, content_key_of(role, kind, content, tool_name, tool_input))"


def summary_key(content: str) -> str:
    """A summary's content key: its text's hash (summaries carry no id of their own)."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


async def subagent_sessions(conn: aiosqlite.Connection, session_id: int) -> list[int]:
    """The sessions of the subagents a session started, and of theirs, at any depth."""
    async with conn.execute(
        "WITH RECURSIVE tree (id) AS (SELECT ? UNION"
        " SELECT s.id FROM sessions s JOIN tree ON s.parent_session_id = tree.id)"
        " SELECT id FROM tree WHERE id != ?", (session_id, session_id),
    ) as cursor:
        return [int(row[0]) for row in await cursor.fetchall()]


async def remember_forgotten(
    conn: aiosqlite.Connection,
    now: datetime,
    *,
    session_ids: Sequence[int] = (),
    agent_session: str | None = None,
    project: str | None = None,
    everything: bool = False,
    hard: bool = False,
) -> int:
    """Record a forget of these sessions (memoryd's ids and/or the agent's id), this
    project, or everything: the scopes and the keys of what they hold now (of everything,
    the scope and what its messages say); `hard`: their text in the archive cleared too,
    once its keys are kept. How many message keys were newly recorded."""
    at = utc_text(now)
    chosen = list(session_ids)
    await conn.create_function("content_key_of", 5, content_key, deterministic=True)
    async with transaction(conn):
        if project is not None:
            async with conn.execute(
                "SELECT id FROM sessions WHERE project = ? OR project IN"
                " (SELECT old_path FROM project_links WHERE new_path = ?)",
                (project, project),
            ) as cursor:
                chosen += [int(row[0]) for row in await cursor.fetchall()]
        scopes: list[tuple[str, str]] = [("session", str(i)) for i in session_ids]
        if agent_session is not None:
            scopes.append(("agent_session", agent_session))
        if project is not None:
            scopes.append(("project", project))
        if everything:
            scopes.append(("everything", "*"))
        await conn.executemany(
            "INSERT INTO forgotten_content (kind, value, forgotten_at) VALUES (?, ?, ?)"
            " ON CONFLICT (kind, value) DO UPDATE"
            " SET forgotten_at = MAX(forgotten_at, excluded.forgotten_at)",
            [(kind, value, at) for kind, value in scopes])
        await drop_forgotten(conn, chosen, agent_session=agent_session,
                             everything=everything, at=at)
        if everything:
            # What is written again later, under any name, stays forgotten too.
            await conn.execute(
                "INSERT OR IGNORE INTO forgotten_content (kind, value, forgotten_at)"
                f" SELECT DISTINCT 'message', {_CONTENT_KEY}, ? FROM session_messages"
                f" WHERE {_CONTENT_KEY} IS NOT NULL", (at,))
            if hard:  # the text itself, in the archive too (`show` prints nothing of it)
                await clear_text(conn, None, now)
        if not chosen:
            return 0
        marks = ",".join("?" for _ in chosen)
        cursor = await conn.execute(
            "INSERT OR IGNORE INTO forgotten_content (kind, value, forgotten_at)"
            f" SELECT DISTINCT 'message', dedupe_key, ? FROM session_messages"
            f" WHERE session_id IN ({marks})", (at, *chosen))
        added = max(cursor.rowcount, 0)
        await cursor.close()
        await conn.execute(
            "INSERT OR IGNORE INTO forgotten_content (kind, value, forgotten_at)"
            f" SELECT DISTINCT 'message', {_CONTENT_KEY}, ? FROM session_messages"
            f" WHERE session_id IN ({marks}) AND {_CONTENT_KEY} IS NOT NULL", (at, *chosen))
        async with conn.execute(
            f"SELECT content FROM session_summaries WHERE session_id IN ({marks})", chosen,
        ) as found:
            summaries = [str(row[0]) for row in await found.fetchall()]
        await conn.executemany(
            "INSERT OR IGNORE INTO forgotten_content (kind, value, forgotten_at)"
            " VALUES ('summary', ?, ?)", [(summary_key(text), at) for text in summaries])
        if hard and not everything:
            await clear_text(conn, chosen, now)
    return added


async def remember_forgotten_range(conn: aiosqlite.Connection, now: datetime,
                                   session_id: int, first: int, last: int) -> int:
    """Record a forget of one memory made of messages `first`..`last` of a session: what
    they say stays forgotten in a copy under any name. How many keys were new."""
    await conn.create_function("content_key_of", 5, content_key, deterministic=True)
    async with transaction(conn):
        cursor = await conn.execute(
            "INSERT OR IGNORE INTO forgotten_content (kind, value, forgotten_at)"
            f" SELECT DISTINCT 'message', {_CONTENT_KEY}, ? FROM session_messages"
            " WHERE session_id = ? AND message_index BETWEEN ? AND ?"
            f" AND {_CONTENT_KEY} IS NOT NULL", (utc_text(now), session_id, first, last))
        added = max(cursor.rowcount, 0)
        await cursor.close()
    return added


async def summary_forgotten(conn: aiosqlite.Connection, content: str) -> bool:
    """Whether a summary with this text was forgotten (in any session)."""
    async with conn.execute(
        "SELECT 1 FROM forgotten_content WHERE kind = 'summary' AND value = ?",
        (summary_key(content),),
    ) as cursor:
        return await cursor.fetchone() is not None
