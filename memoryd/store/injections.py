"""What memoryd gave agents: one row per context block injected by a hook or fetched by a tool.

Never the block's text (that would copy memory into a second place to govern):
when, which agent session, through which interface and event, which memory ids,
and how many characters. Hooks read it so that a session is not given the same
memory twice; `memoryd show` and `sessions` read it to tell what a session was given.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.connection import transaction
from memoryd.store.queries import list_sessions, nest_subagents


@dataclass(frozen=True, slots=True)
class Injection:
    agent: str
    agent_session_id: str | None
    interface: str  # "hook" or "mcp"
    event: str  # session_start, prompt, memory_context, ...
    project: str | None
    memory_ids: tuple[str, ...]
    chars: int


#: An agent's session id as the agents write them (a UUID) or a plain name: no line
#: break, no blank, and no run of 20 letters and digits, which is how tokens look.
_PLAIN_ID = re.compile(r"(?![\s\S]*[A-Za-z0-9]{20})[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def session_key(agent_session_id: str | None) -> str | None:
    """How an agent session's id is kept and looked up here: as it is when it is a UUID or
    a plain name; otherwise (whatever a hook's payload carried: a pasted token, a
    line break that would forge a line) a hash of it, which still joins."""
    if agent_session_id is None or _PLAIN_ID.fullmatch(agent_session_id):
        return agent_session_id
    return "sha256:" + hashlib.sha256(agent_session_id.encode("utf-8", "surrogatepass")
                                      ).hexdigest()[:16]


async def record_injection(conn: aiosqlite.Connection, injection: Injection,
                           now: datetime) -> None:
    async with transaction(conn):
        await conn.execute(
            "INSERT INTO injections (injected_at, agent, agent_session_id, interface, event,"
            " project, memory_ids, chars) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (utc_text(now), injection.agent, session_key(injection.agent_session_id),
             injection.interface,
             injection.event, injection.project, json.dumps(list(injection.memory_ids)),
             injection.chars),
        )


async def injected_memory_ids(conn: aiosqlite.Connection, agent_session_id: str) -> set[str]:
    """Every memory id already given to this agent session."""
    async with conn.execute(
        "SELECT memory_ids FROM injections WHERE agent_session_id = ?",
        (session_key(agent_session_id),)
    ) as cursor:
        rows = await cursor.fetchall()
    return {memory_id for (ids,) in rows for memory_id in json.loads(ids)}


async def injections_for(conn: aiosqlite.Connection,
                         agent_session_ids: Sequence[str]) -> list[dict[str, Any]]:
    """What these agent sessions were given, oldest first."""
    ids = [session_key(i) for i in agent_session_ids if i]
    if not ids:
        return []
    try:
        async with conn.execute(
            "SELECT injected_at, agent, agent_session_id, interface, event, project, memory_ids,"
            f" chars FROM injections WHERE agent_session_id IN ({', '.join('?' for _ in ids)})"
            " ORDER BY injected_at, id", ids,
        ) as cursor:
            rows = await cursor.fetchall()
    except sqlite3.OperationalError:
        return []  # a store not yet migrated by a daemon (read-only readers)
    return [{**dict(r), "memory_ids": json.loads(r["memory_ids"])} for r in rows]


async def injection_counts(conn: aiosqlite.Connection,
                           agent_session_ids: Sequence[str]) -> dict[str, int]:
    """How many blocks each of these agent sessions was given."""
    keys = {session_key(i): i for i in agent_session_ids if i}
    ids = list(keys)
    if not ids:
        return {}
    try:
        async with conn.execute(
            "SELECT agent_session_id, COUNT(*) FROM injections"
            f" WHERE agent_session_id IN ({', '.join('?' for _ in ids)})"
            " GROUP BY agent_session_id", ids,
        ) as cursor:
            return {keys[r[0]]: r[1] for r in await cursor.fetchall()}
    except sqlite3.OperationalError:
        return {}


async def recent_injections(conn: aiosqlite.Connection, limit: int = 200) -> list[dict[str, Any]]:
    """The newest `limit` context blocks given to agents, newest first."""
    try:
        async with conn.execute(
            "SELECT injected_at, agent, agent_session_id, interface, event, project, memory_ids,"
            " chars FROM injections ORDER BY id DESC LIMIT ?", (limit,),
        ) as cursor:
            rows = await cursor.fetchall()
    except sqlite3.OperationalError:
        return []
    return [{**dict(r), "memory_ids": json.loads(r["memory_ids"])} for r in rows]


async def sessions_with_given(conn: aiosqlite.Connection, *, status: str | None = None,
                              source: str | None = None,
                              stale_before: datetime | None = None,
                              flat: bool = False) -> list[dict[str, Any]]:
    """`memoryd sessions`: every session, newest first, with how many context blocks it
    was given (`context_blocks_given`); subagents' sessions counted on their parent's
    (`subagents`) unless `flat`."""
    rows = await list_sessions(conn, status=status, source=source, stale_before=stale_before)
    if not flat:
        rows = nest_subagents(rows)
    given = await injection_counts(conn, [r["external_id"] for r in rows])
    for row in rows:
        row["context_blocks_given"] = given.get(row["external_id"], 0)
    return rows
