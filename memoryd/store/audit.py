"""The audit trail: every read and write of memory, by whom and through what, never content.

One row per operation in `audit_events`: when, the interface (`cli`, `hook`, `mcp`,
`api`, `ui` for the web viewer, `daemon` for its own saves), the action (the API
operation or what the daemon did), the outcome (`ok` or `failed`), the agent and its session when
known, the memory ids touched or returned and a count (results, memories
forgotten, messages saved). `detail` holds a failure's one-line reason, never a
query, a memory's text or a key. `audit_memory_ids` indexes the ids, so
`memoryd audit --memory ID` is one index search. Rows older than
`audit_retention` are deleted by a daily job (`expire`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.connection import run_on_connection, transaction

INTERFACES = ("cli", "hook", "mcp", "api", "daemon", "ui")
DETAIL_CHARS = 300


@dataclass(frozen=True, slots=True)
class AuditEvent:
    interface: str
    action: str
    outcome: str = "ok"
    agent: str | None = None
    agent_session_id: str | None = None
    memory_ids: tuple[str, ...] = ()
    count: int | None = None
    detail: str | None = None


async def record(conn: aiosqlite.Connection, event: AuditEvent, now: datetime, *,
                 in_transaction: bool = False) -> None:
    """Append `event` (in its own transaction unless the caller holds one)."""
    if in_transaction:
        await run_on_connection(conn, insert_events, (event,), now)
        return
    async with transaction(conn):
        await run_on_connection(conn, insert_events, (event,), now)


_INSERT_EVENT = ("INSERT INTO audit_events (at, interface, action, outcome, agent,"
                 " agent_session_id, memory_ids, count, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
#: The ids of the newest `?` events, in their order: those `insert_events` just wrote.
_INSERT_IDS = ("INSERT INTO audit_memory_ids (event_id, memory_id)"
               " SELECT e.id, j.value FROM audit_events e, json_each(e.memory_ids) j"
               " WHERE e.id > (SELECT MAX(id) FROM audit_events) - ? ORDER BY e.id, j.key")


def insert_events(conn: sqlite3.Connection, events: Iterable[AuditEvent], now: datetime) -> None:
    """Append `events` inside the caller's transaction, on the connection's own thread."""
    at = utc_text(now)
    rows = []
    for event in events:
        interface = event.interface if event.interface in INTERFACES else "api"
        # A failure's reason is memoryd's own one-line error: errors never carry secrets.
        detail = event.detail[:DETAIL_CHARS] if event.detail else None
        rows.append((at, interface, event.action, event.outcome, event.agent,
                     event.agent_session_id, json.dumps(list(dict.fromkeys(event.memory_ids))),
                     event.count, detail))
    if not rows:
        return
    # Two statements for a recovery batch's hundred events, not two an event: the events
    # just written are the newest (a new row's id is one past the largest, and the first
    # of them took the write lock), and their ids are read back from their own JSON.
    conn.executemany(_INSERT_EVENT, rows).close()
    conn.execute(_INSERT_IDS, (len(rows),)).close()


async def events(conn: aiosqlite.Connection, *, since: datetime | None = None,
                 memory_id: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
    """The newest `limit` events (optionally since a time, or touching one memory), oldest
    first."""
    where, params = [], []
    if since is not None:
        where.append("e.at >= ?")
        params.append(utc_text(since))
    if memory_id is not None:
        where.append("e.id IN (SELECT event_id FROM audit_memory_ids WHERE memory_id = ?)")
        params.append(memory_id)
    sql = "SELECT e.* FROM audit_events e"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY e.id DESC LIMIT ?"
    conn.row_factory = aiosqlite.Row
    async with conn.execute(sql, (*params, limit)) as cur:
        rows = list(await cur.fetchall())
    return [{"at": r["at"], "interface": r["interface"], "action": r["action"],
             "outcome": r["outcome"], "agent": r["agent"],
             "agent_session_id": r["agent_session_id"],
             "memory_ids": json.loads(r["memory_ids"]), "count": r["count"],
             "detail": r["detail"]} for r in reversed(rows)]


async def expire(conn: aiosqlite.Connection, before: datetime) -> int:
    """Delete events older than `before`; how many went."""
    async with transaction(conn):
        await conn.execute(
            "DELETE FROM audit_memory_ids WHERE event_id IN"
            " (SELECT id FROM audit_events WHERE at < ?)", (utc_text(before),))
        cur = await conn.execute("DELETE FROM audit_events WHERE at < ?", (utc_text(before),))
        count = cur.rowcount
        await cur.close()
    return max(count, 0)


def ids_in(result: Any) -> tuple[tuple[str, ...], int | None]:
    """The memory ids an API answer names, and its count (results, forgotten, ...)."""
    if not isinstance(result, dict):
        return (), None
    ids: list[str] = []
    count: int | None = None
    for item in result.get("results") or ():
        if isinstance(item, dict) and isinstance(item.get("memory_id"), str):
            ids.append(item["memory_id"])
    if "results" in result:
        count = len(ids)
    memory = result.get("memory")
    if isinstance(memory, dict) and isinstance(memory.get("id"), str):
        ids.append(memory["id"])
    for key in ("replaced",):
        if isinstance(result.get(key), str):
            ids.append(result[key])
    for item in result.get("history") or ():
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            ids.append(item["id"])
    for key in ("memory_ids", "given"):
        value = result.get(key)
        if isinstance(value, list):
            ids.extend(v for v in value if isinstance(v, str))
    if isinstance(result.get("forgotten"), int):
        count = result["forgotten"]
    return tuple(ids), count
