"""The chain's durable outbox: what a layer missed while it was down, in order.

One SQLite file (`<state_dir>/outbox.db`, WAL, `synchronous=FULL`): an entry is
on disk before the save that needed it returns, so a SIGKILL at any instant
loses nothing. Each entry names the layer it must reach, the operation
(`segment`, `summary`, `requested`, `distilled`, `record`, `forget`,
`forget_where`), a key
(the memory id, so a save recorded twice is one entry) and its arguments as
JSON. Draining replays entries oldest first with the same ids; a layer stores
an id once, so an entry replayed again after a crash doubles nothing.

An entry that fails for a reason other than the layer being down is retried
MAX_ATTEMPTS times and then parked: kept, reported by `status` and `doctor`,
never sent again by itself (`memoryd memory outbox --retry` sends it again).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import dataclass, fields
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from memoryd import sqlite
from memoryd.clock import Clock
from memoryd.errors import BackendError, BackendUnavailable
from memoryd.memory.export_format import from_utc_text, to_utc_text
from memoryd.memory.models import (
    ConversationSegment,
    DistilledMemory,
    RequestedMemory,
    SessionSummary,
    Turn,
)
from memoryd.sqlite import shrink_memory

log = structlog.get_logger("memoryd.memory.outbox")

MAX_ATTEMPTS = 5
OPS = ("segment", "summary", "requested", "distilled", "record", "forget", "forget_where")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY,
    layer TEXT NOT NULL,
    op TEXT NOT NULL,
    key TEXT NOT NULL,
    payload TEXT NOT NULL,
    stored_in TEXT,
    created_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    parked INTEGER NOT NULL DEFAULT 0,
    UNIQUE (layer, op, key)
)
"""
_DATETIMES = frozenset({"started_at", "ended_at", "said_at"})
_TUPLES = frozenset({"message_uuids", "tags"})
Saved = ConversationSegment | SessionSummary | RequestedMemory | DistilledMemory
_KINDS: dict[str, type[Saved]] = {
    "segment": ConversationSegment, "summary": SessionSummary, "requested": RequestedMemory,
    "distilled": DistilledMemory}


def encode(value: Saved) -> dict[str, Any]:
    """A saved value's constructor arguments as JSON-ready data (its id is recomputed)."""
    out: dict[str, Any] = {}
    for f in fields(value):
        if not f.init:
            continue
        item = getattr(value, f.name)
        if isinstance(item, datetime):
            item = to_utc_text(item)
        elif f.name == "turns":
            item = [{"index": t.index, "role": t.role, "text": t.text,
                     "at": to_utc_text(t.at) if t.at else None} for t in item]
        elif isinstance(item, tuple):
            item = list(item)
        out[f.name] = item
    return out



def decode(op: str, payload: dict[str, Any]) -> Saved:
    """The value `encode` made `payload` from (`op` names its kind)."""
    kind = _KINDS[op]
    args: dict[str, Any] = {
        k: (from_utc_text(v) if k in _DATETIMES and v is not None
            else tuple(v) if k in _TUPLES else v) for k, v in payload.items()}
    if "turns" in args:
        args["turns"] = tuple(
            Turn(t["index"], t["role"], t["text"], from_utc_text(t["at"]) if t["at"] else None)
            for t in args["turns"])
    return kind(**args)


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    layer: str
    op: str
    key: str
    payload: dict[str, Any]
    stored_in: str | None
    created_at: datetime
    attempts: int
    last_error: str | None
    parked: bool


@dataclass(frozen=True, slots=True)
class Depth:
    """How much waits for one layer."""

    layer: str
    waiting: int
    parked: int
    oldest: datetime | None


class Outbox:
    """Open with `await Outbox.open(path, clock=c)`; every method commits before returning."""

    def __init__(self, conn: aiosqlite.Connection, path: Path, clock: Clock) -> None:
        self._conn: aiosqlite.Connection | None = conn
        self._path = path
        self._clock = clock
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path, *, clock: Clock) -> Outbox:
        conn = await sqlite.open_durable(
            path, what=f"outbox {path}", schema=[_SCHEMA],
            transient=partial(BackendUnavailable, backend="outbox"),
            other=partial(BackendError, backend="outbox"))
        return cls(conn, path, clock)

    @property
    def path(self) -> Path:
        return self._path

    def _connection(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise BackendError("the outbox is closed", backend="outbox")
        return self._conn

    async def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        async with self._lock:
            try:
                async with self._connection().execute(sql, params) as cur:
                    return list(await cur.fetchall())
            except sqlite3.Error as exc:
                # Locked or full: try again later (the caller keeps the sync index, the
                # drain pauses); anything else is an error of its own.
                kind = (BackendUnavailable if any(m in str(exc).lower() for m in (
                    "locked", "disk is full", "disk i/o")) else BackendError)
                raise kind(f"outbox {self._path}: {exc}", backend="outbox") from exc

    async def add(self, layer: str, op: str, key: str, payload: dict[str, Any],
                  stored_in: str | None = None, *, parked_because: str | None = None) -> bool:
        """Record that `layer` must get this; False when it was already waiting.

        `parked_because`: kept but never replayed by itself (an add whose outcome is
        unknown); a person decides (`memoryd memory outbox`).
        """
        if op not in OPS:
            raise ValueError(f"unknown outbox operation {op!r}")
        parked = parked_because is not None
        rows = await self._run(
            "INSERT INTO outbox (layer, op, key, payload, stored_in, created_at, parked,"
            " last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (layer, op, key) DO UPDATE"
            " SET parked = MAX(parked, excluded.parked),"
            " last_error = COALESCE(excluded.last_error, last_error) RETURNING seq",
            (layer, op, key, json.dumps(payload, sort_keys=True), stored_in,
             to_utc_text(self._clock.now()), int(parked), parked_because))
        log.info("outbox_added", layer=layer, op=op, key=key, stored_in=stored_in,
                 parked=parked)
        return bool(rows)

    async def drop_parked(self, layer: str, keys: set[str]) -> int:
        """Forget the parked entries with these keys (a person found them delivered)."""
        if not keys:
            return 0
        marks = ", ".join("?" for _ in keys)
        return len(await self._run(
            f"DELETE FROM outbox WHERE parked = 1 AND layer = ? AND key IN ({marks})"
            " RETURNING seq", (layer, *sorted(keys))))

    async def purge_saves(self) -> int:
        """Delete every save waiting or parked (they carry text): everything a person asked
        to be forgotten must not arrive later. Forgets stay queued."""
        return len(await self._run(
            "DELETE FROM outbox WHERE op IN"
            " ('segment', 'summary', 'requested', 'distilled', 'record') RETURNING seq"))

    async def stored_in(self, seq: int, layer: str) -> None:
        await self._run("UPDATE outbox SET stored_in = ? WHERE seq = ?", (layer, seq))

    async def has_waiting(self, layer: str) -> bool:
        rows = await self._run(
            "SELECT 1 FROM outbox WHERE layer = ? AND parked = 0 LIMIT 1", (layer,))
        return bool(rows)

    async def waiting(self, layer: str, limit: int = 100) -> list[Entry]:
        """The oldest entries still to replay to `layer`, in the order they were made."""
        rows = await self._run(
            "SELECT * FROM outbox WHERE layer = ? AND parked = 0 ORDER BY seq LIMIT ?",
            (layer, limit))
        return [self._entry(r) for r in rows]

    async def parked(self, layer: str | None = None) -> list[Entry]:
        sql, params = "SELECT * FROM outbox WHERE parked = 1", tuple[str, ...]()
        if layer is not None:
            sql, params = sql + " AND layer = ?", (layer,)
        return [self._entry(r) for r in await self._run(sql + " ORDER BY seq", params)]

    async def done(self, seq: int) -> None:
        await self._run("DELETE FROM outbox WHERE seq = ?", (seq,))

    async def failed(self, seq: int, error: str, *, park: bool = False) -> bool:
        """Count a failed replay; parks the entry (and returns True) after MAX_ATTEMPTS."""
        rows = await self._run(
            "UPDATE outbox SET attempts = attempts + 1, last_error = ?,"
            " parked = CASE WHEN ? OR attempts + 1 >= ? THEN 1 ELSE 0 END"
            " WHERE seq = ? RETURNING parked", (error[:500], park, MAX_ATTEMPTS, seq))
        return bool(rows and rows[0]["parked"])

    async def unpark(self, layer: str | None = None) -> int:
        sql, params = ("UPDATE outbox SET parked = 0, attempts = 0 WHERE parked = 1",
                       tuple[str, ...]())
        if layer is not None:
            sql, params = sql + " AND layer = ?", (layer,)
        return len(await self._run(sql + " RETURNING seq", params))

    async def depth(self) -> list[Depth]:
        rows = await self._run(
            "SELECT layer, SUM(parked = 0) AS waiting, SUM(parked = 1) AS parked,"
            " MIN(created_at) AS oldest FROM outbox GROUP BY layer ORDER BY layer")
        return [Depth(r["layer"], int(r["waiting"]), int(r["parked"]),
                      from_utc_text(r["oldest"]) if r["oldest"] else None) for r in rows]

    @staticmethod
    def _entry(row: sqlite3.Row) -> Entry:
        return Entry(row["seq"], row["layer"], row["op"], row["key"], json.loads(row["payload"]),
                     row["stored_in"], from_utc_text(row["created_at"]), row["attempts"],
                     row["last_error"], bool(row["parked"]))

    async def release_memory(self) -> None:
        if self._conn is not None:
            await shrink_memory(self._conn)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
