"""The Memory Gateway backend: an HTTP memory service (the hybrid gateway design's protocol).

    POST {base_url}/memories/search  {user_id, user_key, conversation_id, query, scope,
                                      top_k, app_id, project_id} -> {"results": [...]}
    POST {base_url}/memories/add     {user_id, user_key, session_id, app_id, project_id,
                                      messages: [{sender_id, role, timestamp, content}]}
    POST {base_url}/memories/flush   {user_id, user_key, session_id, app_id, project_id}

What memoryd sends and accepts:

- Search: only a top-level `results` list is accepted; anything else is a failure.
  Each result is reduced to id, session_id, text, score, source_scope and
  resource_uri (anything else, `raw` included, is dropped) and comes back as a
  conversation memory whose `layer` is `gateway`: context blocks label it as
  untrusted reference data.
- Saving a segment: one add with the person's and the agent's words only
  (`ConversationSegment.turns`: no tool calls or results, reasoning, system,
  injected or recalled text), timestamps in UTC epoch milliseconds, positive and
  strictly increasing; then exactly one flush for that session, never after a
  failed add. The gateway has no ids of its own, so a local ledger
  (`<state_dir>/gateway.db`) records, per session, the last message index sent:
  a segment saved again (a retry, a crash before the sync index moved) or
  extended (a longer save of a tail) sends only what the gateway has not had.
- An add whose answer was lost (a read timeout, a dropped connection, a reply
  that is not JSON) may have been applied: it is never retried by itself. The
  ledger marks it `unknown` and the save raises BackendOutcomeUnknown, which the
  chain parks in its outbox for a person to resolve (`memoryd memory outbox`).
- Errors carry the operation, the path and the status, never the key or a
  request body; `user_key` is read from the environment variable the settings
  name and never logged. Every call is logged as a `gateway_call` event and kept as
  a row of the ledger's `gateway_calls` (time, operation, outcome, status,
  duration, memoryd session, count; never a query, text or key): `memoryd audit`
  shows them beside the daemon's own audit trail, and they expire with it.
- No forget, no correct, no export, no temporal filters: the capability set says
  so, and the chain acts on its other layers and reports that the gateway's copy
  remains.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import aiosqlite
import httpx
import structlog

from memoryd import sqlite
from memoryd.clock import Clock
from memoryd.errors import (
    BackendError,
    BackendUnavailable,
    BackendUnsupported,
    GatewayError,
    GatewayUnavailable,
    GatewayUnknown,
)
from memoryd.memory.export_format import to_utc_text
from memoryd.memory.models import (
    ConversationSegment,
    DeletionRecord,
    DistilledMemory,
    Memory,
    MemoryType,
    Provenance,
    RecallResult,
    RequestedMemory,
    SaveResult,
    SessionSummary,
)
from memoryd.memory.protocol import Capability, RecallOrder
from memoryd.memory.recall import per_session

log = structlog.get_logger("memoryd.memory.gateway")

BACKEND_NAME = "gateway"
SCOPES = ("current_chat", "resources", "all_user_memory")
#: After a transient failure the gateway counts as down this long (the chain falls back).
DOWN_FOR = 30.0
_LEDGER = """
CREATE TABLE IF NOT EXISTS gateway_sent (
    session TEXT PRIMARY KEY,
    last_index INTEGER NOT NULL,
    pending_index INTEGER,
    pending_segment TEXT,
    updated_at TEXT NOT NULL
)
"""
_CALLS = """
CREATE TABLE IF NOT EXISTS gateway_calls (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    operation TEXT NOT NULL,
    outcome TEXT NOT NULL,
    status INTEGER,
    ms REAL NOT NULL,
    session TEXT,
    count INTEGER,
    detail TEXT
)
"""
_CALLS_BY_TIME = "CREATE INDEX IF NOT EXISTS gateway_calls_by_at ON gateway_calls (at)"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    base_url: str
    user_id: str
    user_key: str
    app_id: str = "default"
    project_id: str = "default"
    scope: tuple[str, ...] = ("all_user_memory",)
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.scope or any(s not in SCOPES for s in self.scope):
            raise ValueError(f"scope must be a non-empty subset of {', '.join(SCOPES)}")

    def __repr__(self) -> str:  # the key never reaches a log line or a traceback
        return (f"GatewayConfig(base_url={self.base_url!r}, user_id={self.user_id!r},"
                " user_key='***')")


class GatewayMemoryBackend:
    """Open with `await GatewayMemoryBackend.open(config, ledger=path, clock=c)`."""

    name = BACKEND_NAME
    capabilities = frozenset({Capability.RECALL})

    def __init__(self, config: GatewayConfig, client: httpx.AsyncClient,
                 ledger: aiosqlite.Connection, clock: Clock) -> None:
        self._config = config
        self._client = client
        self._ledger: aiosqlite.Connection | None = ledger
        self._clock = clock
        self._down_until = 0.0
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, config: GatewayConfig, *, ledger: Path, clock: Clock,
                   transport: httpx.AsyncBaseTransport | None = None) -> GatewayMemoryBackend:
        if not config.user_key:
            raise BackendError("no user key (memory.gateway.user_key_env names an empty or"
                               " unset environment variable)", backend=BACKEND_NAME)
        # Durable and waiting for a writer: the CLI may resolve an entry meanwhile.
        conn = await sqlite.open_durable(
            ledger, what=f"ledger {ledger}", schema=[_LEDGER, _CALLS, _CALLS_BY_TIME],
            transient=partial(BackendUnavailable, backend=BACKEND_NAME),
            other=partial(BackendError, backend=BACKEND_NAME))
        client = httpx.AsyncClient(base_url=config.base_url.rstrip("/"),
                                   timeout=config.timeout, transport=transport,
                                   headers={"content-type": "application/json"})
        return cls(config, client, conn, clock)

    # -- HTTP -------------------------------------------------------------------------------

    def _identity(self) -> dict[str, Any]:
        return {"user_id": self._config.user_id, "user_key": self._config.user_key,
                "app_id": self._config.app_id, "project_id": self._config.project_id}

    async def _post(self, operation: str, path: str, body: Mapping[str, Any], *,
                    applies: bool, session: str | None = None, count: int | None = None) -> Any:
        """POST `body`; the answer's JSON. `applies`: the call changes the gateway, so an
        answer lost after the request went out is GatewayUnknown, not unavailable.
        Every call that ends (not one cancelled) is recorded in the ledger's audit rows."""
        started = time.monotonic()
        try:
            exchanged = await self._exchange(operation, path, body, applies=applies)
        except GatewayError as exc:
            ms = round((time.monotonic() - started) * 1000, 1)
            outcome = "unknown" if isinstance(exc, GatewayUnknown) else "failed"
            log.warning("gateway_call", operation=operation, path=path, outcome=outcome,
                        status=exc.status, error=str(exc), ms=ms)
            await self._record_call(operation, outcome, exc.status, ms, session, count,
                                    str(exc))
            raise
        status, answer = exchanged
        ms = round((time.monotonic() - started) * 1000, 1)
        log.info("gateway_call", operation=operation, path=path, outcome="ok", status=status,
                 ms=ms)
        if operation == "search" and isinstance(answer, dict) and isinstance(
                answer.get("results"), list):
            count = len(answer["results"])
        await self._record_call(operation, "ok", status, ms, session, count, None)
        return answer

    async def _exchange(self, operation: str, path: str, body: Mapping[str, Any], *,
                        applies: bool) -> tuple[int, Any]:
        """The request and its answer's (status, JSON), or a typed GatewayError."""
        try:
            response = await self._client.post(path, json=dict(body))
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            self._fail(GatewayUnavailable, operation, path, _kind(exc))
        except httpx.HTTPError as exc:
            # Sent, or partly sent, and no answer: applied or not, nobody knows.
            self._fail(GatewayUnknown if applies else GatewayUnavailable,
                       operation, path, _kind(exc))
        status = response.status_code
        if status == 401 or status == 403:
            raise GatewayError(operation, path, "the user key was refused", status)
        if applies and status in (502, 504):
            # A proxy's "bad gateway" or "timeout": the add may have been applied behind it.
            self._fail(GatewayUnknown, operation, path, "", status)
        if status == 429 or status >= 500:
            self._fail(GatewayUnavailable, operation, path, "", status)
        if not 200 <= status < 300:
            raise GatewayError(operation, path, "", status)
        try:
            return status, response.json()
        except ValueError:
            self._fail(GatewayUnknown if applies else GatewayUnavailable,
                       operation, path, "the answer is not JSON")

    async def _record_call(self, operation: str, outcome: str, status: int | None, ms: float,
                           session: str | None, count: int | None, detail: str | None) -> None:
        # The error text is memoryd's own (operation, path, status): never a body or key.
        try:
            await self._db().execute(
                "INSERT INTO gateway_calls (at, operation, outcome, status, ms, session, count,"
                " detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (to_utc_text(self._clock.now()), operation, outcome, status, ms, session,
                 count, detail))
        except (sqlite3.Error, BackendError) as exc:
            log.warning("gateway_audit_not_recorded", operation=operation, error=str(exc))

    def _fail(self, kind: type[GatewayError], operation: str, path: str, problem: str,
              status: int | None = None) -> NoReturn:
        if issubclass(kind, BackendUnavailable):
            self._down_until = self._clock.monotonic() + DOWN_FOR
        raise kind(operation, path, problem, status)

    # -- the ledger -------------------------------------------------------------------------

    def _db(self) -> aiosqlite.Connection:
        if self._ledger is None:
            raise BackendError("the memory backend is closed", backend=BACKEND_NAME)
        return self._ledger

    async def _ledger_row(self, session: str) -> sqlite3.Row | None:
        async with self._db().execute("SELECT * FROM gateway_sent WHERE session = ?",
                                      (session,)) as cur:
            return await cur.fetchone()

    async def _ledger_set(self, session: str, *, last: int | None, pending: int | None,
                          segment: str | None) -> None:
        await self._db().execute(
            "INSERT INTO gateway_sent (session, last_index, pending_index, pending_segment,"
            " updated_at) VALUES (?, COALESCE(?, -1), ?, ?, ?) ON CONFLICT (session) DO UPDATE"
            " SET last_index = COALESCE(?, last_index), pending_index = ?,"
            " pending_segment = ?, updated_at = excluded.updated_at",
            (session, last, pending, segment, self._clock.now().isoformat(), last, pending,
             segment))

    async def unknown(self) -> list[tuple[str, str]]:
        """(gateway session, segment id) of every add whose outcome is unknown."""
        async with self._db().execute(
                "SELECT session, pending_segment FROM gateway_sent"
                " WHERE pending_index IS NOT NULL ORDER BY session") as cur:
            return [(r["session"], r["pending_segment"]) for r in await cur.fetchall()]

    async def resolve_unknown(self, *, applied: bool) -> int:
        """A person looked: the unknown adds were `applied` (count them as sent) or not
        (send them again). Returns how many were resolved."""
        async with self._lock:
            rows = await self.unknown()
            if applied:
                await self._db().execute(
                    "UPDATE gateway_sent SET last_index = pending_index, pending_index = NULL,"
                    " pending_segment = NULL WHERE pending_index IS NOT NULL")
            else:
                await self._db().execute(
                    "UPDATE gateway_sent SET pending_index = NULL, pending_segment = NULL")
        return len(rows)

    # -- protocol -------------------------------------------------------------------------

    async def is_available(self) -> bool:
        return self._ledger is not None and self._clock.monotonic() >= self._down_until

    async def recall(self, query: str, *, project: str | None = None, limit: int = 10,
                     since: datetime | None = None, until: datetime | None = None,
                     types: Iterable[MemoryType] | None = None, all_projects: bool = False,
                     order: RecallOrder = "score", agent: str | None = None,
                     ) -> list[RecallResult]:
        # `agent` is not passed on: the gateway keeps a user's conversation without agent
        # scopes (docs/privacy.md).
        wanted = None if types is None else {MemoryType(t) for t in types}
        if (not query.strip() or limit <= 0 or since is not None or until is not None
                or order != "score" or (wanted is not None
                                        and MemoryType.CONVERSATION not in wanted)):
            return []  # the gateway has no time filters, order or kinds beyond conversation
        body = {**self._identity(), "conversation_id": "", "query": query,
                "scope": list(self._config.scope),
                "top_k": max(1, min(limit, 100))}
        answer = await self._post("search", "/memories/search", body, applies=False)
        if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
            self._fail(GatewayUnavailable, "search", "/memories/search",
                       "the answer has no top-level results list")
        now = self._clock.now()
        results = []
        for item in answer["results"]:
            reduced = _reduce(item)
            if reduced is None:
                continue
            score = reduced["score"]
            results.append(RecallResult(
                memory_id=reduced["id"], type=MemoryType.CONVERSATION, content=reduced["text"],
                score=score, relevance=max(0.0, min(1.0, score)),
                provenance=Provenance(session_external_id=reduced["session_id"],
                                      source=BACKEND_NAME),
                created_at=now, tags=tuple(t for t in (reduced["source_scope"],
                                                       reduced["resource_uri"]) if t),
                layer=BACKEND_NAME))
        return per_session.one_per_session(results, limit)

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        # memoryd's own session: agents reuse their ids (forks, resumed histories), and a
        # ledger keyed by theirs would hold back one session's turns as "already sent".
        own = segment.session_id
        session = f"chat:{own if own is not None else segment.session_external_id}"
        async with self._lock:
            row = await self._ledger_row(session)
            if row is not None and row["pending_index"] is not None:
                raise GatewayUnknown("add", "/memories/add", "an earlier add of this session"
                                     " has an unknown outcome")
            sent = row["last_index"] if row is not None else -1
            turns = [t for t in segment.turns if t.index > sent]
            if not turns:
                return SaveResult(id=segment.id, created=False)
            messages = _messages(turns, segment, self._config.user_id)
            await self._ledger_set(session, last=None, pending=turns[-1].index,
                                   segment=segment.id)
            body = {**self._identity(), "session_id": session, "messages": messages}
            try:
                await self._post("add", "/memories/add", body, applies=True,
                                 session=session, count=len(messages))
            except GatewayError as exc:
                if isinstance(exc, GatewayUnknown):
                    raise  # the ledger keeps it pending: parked, never sent again by itself
                # Refused with an answer (401, 400, 503...): not applied, may be sent again.
                await self._ledger_set(session, last=None, pending=None, segment=None)
                raise
            # Anything else (cancelled mid-request at shutdown, say) leaves it pending: the
            # request may have reached the gateway, so it is never resent by itself.
            await self._ledger_set(session, last=turns[-1].index, pending=None, segment=None)
        try:
            await self._post("flush", "/memories/flush",
                             {**self._identity(), "session_id": session}, applies=False,
                             session=session)
        except GatewayError as exc:
            # The add landed: the segment is saved. A flush is asked once and not repeated.
            log.warning("gateway_flush_failed", session=session, error=str(exc))
        return SaveResult(id=segment.id, created=True)

    async def _unsupported(self, what: str) -> NoReturn:
        raise BackendUnsupported(f"the gateway cannot {what}", backend=BACKEND_NAME)

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        await self._unsupported("store session summaries")

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        await self._unsupported("store single facts")

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        await self._unsupported("store single facts")

    async def remember(self, content: str, **_: Any) -> Memory:
        await self._unsupported("remember single facts")

    async def correct(self, memory_id: str, new_content: str, **_: Any) -> Memory:
        await self._unsupported("correct")

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        await self._unsupported("forget")

    async def forget_where(self, **_: Any) -> int:
        await self._unsupported("forget")

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        return None

    async def get(self, memory_id: str) -> Memory | None:
        return None

    async def history(self, memory_id: str) -> list[Memory]:
        return []

    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        return []

    async def export(self, project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        await self._unsupported("export")
        yield {}  # pragma: no cover - makes this an async generator

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        await self._unsupported("import")

    async def close(self) -> None:
        ledger, self._ledger = self._ledger, None
        await self._client.aclose()
        if ledger is not None:
            await ledger.close()


async def call_events(ledger: Path, *, since: datetime | None = None,
                      limit: int = 1000) -> list[dict[str, Any]]:
    """The newest `limit` recorded gateway calls (since a time), oldest first; [] when
    the ledger does not exist (no gateway configured)."""
    if not await asyncio.to_thread(ledger.exists):
        return []
    sql, params = "SELECT * FROM gateway_calls", []
    if since is not None:
        sql += " WHERE at >= ?"
        params.append(to_utc_text(since))
    sql += " ORDER BY id DESC LIMIT ?"
    def read() -> list[dict[str, Any]]:
        with sqlite.opened(ledger, readonly=True) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, (*params, limit))]

    try:
        rows = await asyncio.to_thread(read)
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []  # a ledger from before gateway calls were recorded
        raise BackendError(f"gateway ledger {ledger}: {exc}", backend=BACKEND_NAME) from exc
    except (OSError, sqlite3.Error) as exc:
        raise BackendError(f"gateway ledger {ledger}: {exc}", backend=BACKEND_NAME) from exc
    return list(reversed(rows))


async def expire_calls(ledger: Path, before: datetime) -> int:
    """Delete recorded gateway calls older than `before` (the audit retention); how many."""
    if not await asyncio.to_thread(ledger.exists):
        return 0
    def delete() -> int:
        with sqlite.opened(ledger) as conn:
            try:
                cur = conn.execute("DELETE FROM gateway_calls WHERE at < ?",
                                   (to_utc_text(before),))
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return 0
                raise
            return max(cur.rowcount, 0)

    try:
        return await asyncio.to_thread(delete)
    except (OSError, sqlite3.Error) as exc:
        raise BackendError(f"gateway ledger {ledger}: {exc}", backend=BACKEND_NAME) from exc


def _kind(exc: BaseException) -> str:
    """An httpx failure by its kind only (its text can hold the URL's credentials)."""
    kinds: dict[type[BaseException], str] = {
        httpx.ConnectError: "connection refused or unreachable",
        httpx.ConnectTimeout: "connect timed out", httpx.PoolTimeout: "no free connection",
        httpx.ReadTimeout: "timed out waiting for the answer",
        httpx.WriteTimeout: "timed out sending",
        httpx.RemoteProtocolError: "the connection closed without an answer"}
    return kinds.get(type(exc), type(exc).__name__)


def _reduce(item: Any) -> dict[str, Any] | None:
    """A search result reduced to the fields memoryd keeps; None when it is unusable."""
    if not isinstance(item, dict):
        return None
    text, ident = item.get("text"), item.get("id")
    if not isinstance(text, str) or not text.strip() or not isinstance(ident, str | int):
        return None
    score = item.get("score")
    return {"id": str(ident), "text": text,
            "session_id": str(item["session_id"]) if item.get("session_id") else None,
            "score": float(score) if isinstance(score, int | float)
            and not isinstance(score, bool) else 0.0,
            "source_scope": item.get("source_scope") if isinstance(
                item.get("source_scope"), str) else None,
            "resource_uri": item.get("resource_uri") if isinstance(
                item.get("resource_uri"), str) else None}


def _messages(turns: Sequence[Any], segment: ConversationSegment,
              user_id: str) -> list[dict[str, Any]]:
    """The add's messages: UTC epoch milliseconds, positive and strictly increasing."""
    fallback = segment.started_at or segment.ended_at
    base = int(fallback.timestamp() * 1000) if fallback is not None else 1
    out: list[dict[str, Any]] = []
    previous = 0
    for turn in turns:
        stamp = int(turn.at.timestamp() * 1000) if turn.at is not None else base
        stamp = max(stamp, previous + 1, 1)
        previous = stamp
        out.append({"sender_id": user_id if turn.role == "user" else "assistant",
                    "role": turn.role, "timestamp": stamp, "content": turn.text})
    return out
