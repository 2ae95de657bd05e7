"""What `memoryd status` reports: the daemon's process, its sources, lag and backlog.

Read-only: it opens the database in read-only mode, so it works while the daemon
runs and never changes anything.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.errors import MemorydError
from memoryd.ingest.discovery import discover
from memoryd.lifecycle.expiry import shown_as_of
from memoryd.lifecycle.throughput import eta_seconds
from memoryd.lock import read_lock_info
from memoryd.memory.chain import ChainBackend
from memoryd.memory.draining import describe_depth
from memoryd.memory.opening import is_chain, memory_user, open_memory_backend
from memoryd.memory.protocol import MemoryBackend, vector_queue
from memoryd.store import queries
from memoryd.store.connection import connect
from memoryd.store.distill_queue import distill_counts, has_queue


def status_path(settings: Settings) -> Path:
    return settings.state_dir / "status.json"


def read_runtime_status(settings: Settings) -> dict[str, Any] | None:
    try:
        data = json.loads(status_path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: A last line without its newline, unchanged this long, is reported as held back: an
#: agent writing it would have finished by then.
HELD_BACK_AFTER = 10.0
#: How much of a file's unstored tail is read to tell a partial last line.
TAIL_PEEK = 1 << 20


def _partial_last_line(path: str, offset: int, size: int, now: float) -> bool:
    """Whether the unstored tail of a line file is one line without its newline that has
    not changed for HELD_BACK_AFTER seconds: the tailer waits for that newline."""
    try:
        if now - os.stat(path).st_mtime < HELD_BACK_AFTER or size - offset > TAIL_PEEK:
            return False
        with open(path, "rb") as handle:
            handle.seek(offset)
            return b"\n" not in handle.read(size - offset)
    except OSError:
        return False


def _lag(offsets: list[tuple[str, str, int, bool]], known: set[str], settings: Settings,
         now: float) -> dict[str, Any]:
    """Bytes written to transcripts but not yet stored, over known and new files: in all,
    per agent, and the files held back by a last line without its newline."""
    by_source: dict[str, int] = {}
    held: list[dict[str, Any]] = []
    for path, source, offset, is_document in offsets:
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        waiting = (0 if size == offset else size) if is_document else max(0, size - offset)
        by_source[source] = by_source.get(source, 0) + waiting
        if waiting and not is_document and _partial_last_line(path, offset, size, now):
            held.append({"path": path, "bytes": waiting,
                         "reason": "a partial last line (no newline at its end)"})
    for candidate in discover(settings.enabled_sources()):
        if candidate.path in known:
            continue
        try:
            waiting = os.stat(candidate.path).st_size
        except OSError:
            continue
        kind = candidate.kind.value
        by_source[kind] = by_source.get(kind, 0) + waiting
    return {"ingestion_lag_bytes": sum(by_source.values()),
            "ingestion_lag_by_source": by_source, "ingestion_held_back": held}


def _uptime(started_at: str, now: datetime) -> float | None:
    try:
        started = datetime.fromisoformat(started_at)
    except ValueError:
        return None
    return max(0.0, (now - started).total_seconds())


async def _has_schema(conn: aiosqlite.Connection) -> bool:
    async with conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'") as cur:
        return await cur.fetchone() is not None


async def layer_states(chain: ChainBackend, settings: Settings) -> list[dict[str, Any]]:
    """Each layer of the chain: where it is, whether it answers, why not."""
    states = []
    for layer in chain.layers:
        available = await layer.available()
        state: dict[str, Any] = {"backend": layer.name, "where": where_is(layer.name, settings),
                                 "available": available}
        if not available and layer.last_error:
            state["detail"] = layer.last_error
        states.append(state)
    return states


def where_is(kind: str, settings: Settings) -> str:
    """Where a layer keeps memory, as status and doctor may show it (never a password)."""
    if kind == "sqlite":
        return str(settings.memory_path)
    if kind == "jsonl":
        return str(settings.jsonl_path)
    if kind == "postgres":
        from memoryd.memory.backends.postgres.schema import describe

        dsn = os.environ.get(settings.memory.postgres.dsn_env, "")
        return (describe(dsn) if dsn else f"${settings.memory.postgres.dsn_env} not set")
    if kind == "gateway":  # without any user:password@ in it
        return re.sub(r"//[^/@\s]*@", "//", settings.memory.gateway.base_url)
    return kind


async def _memory_status(settings: Settings, clock: Clock, opened: MemoryBackend | None,
                         runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    memory: dict[str, Any] = {"backend": settings.memory.backend,
                              "user": memory_user(settings),
                              "path": where_is(settings.memory.backend, settings),
                              "available": False,
                              "embedder": None, "chunks_waiting_for_vector": 0,
                              "embedding_per_second": None,
                              "embedding_done_in_seconds": None}
    if is_chain(settings):
        memory["backends"] = list(settings.memory.backends)
    elif not settings.memory_path.exists() and opened is None:
        memory["detail"] = "not created yet"
        return memory
    try:
        backend = opened or await open_memory_backend(settings, clock)
    except MemorydError as exc:
        memory["detail"] = str(exc)
        return memory
    try:
        if isinstance(backend, ChainBackend):
            memory["layers"] = await layer_states(backend, settings)
            memory["outbox"] = describe_depth(await backend.depth(), clock.now())
        memory["available"] = await backend.is_available()
        queue = vector_queue(backend)
        if queue is not None and queue.embedder is not None:
            # The embedding backlog: how far the background queue is from hybrid recall
            # seeing every memory (until then the rest are found by keywords only).
            memory["embedder"] = queue.embedder.name
            if queue.embedder.name.startswith("local:"):
                from memoryd.memory.embeddings import local

                memory["model_weights"] = (
                    "present" if local.available(settings.models_path) else
                    "not fetched yet" if settings.memory.embeddings.fetch_model else "missing")
            if memory["available"]:
                try:
                    memory["chunks_waiting_for_vector"] = await queue.pending_embeddings()
                except MemorydError as exc:  # status reports trouble, it never fails on it
                    memory["detail"] = str(exc)
            # The daemon's embedding job: its pace, and when the backlog should be done.
            pace = (runtime or {}).get("embedding")
            memory["embedding_per_second"] = pace.get("per_second") if pace else None
            eta = eta_seconds(memory["chunks_waiting_for_vector"], pace)
            memory["embedding_done_in_seconds"] = round(eta) if eta is not None else None
    finally:
        if opened is None:
            await backend.close()
    return memory


async def collect_status(settings: Settings, clock: Clock,
                         memory: MemoryBackend | None = None) -> dict[str, Any]:
    """`memoryd status`; `memory`: a backend the caller holds open (the daemon's, the
    viewer's), asked instead of opening another (its embedder, its migrations) per call."""
    holder = read_lock_info(settings.lock_path)
    runtime = read_runtime_status(settings) or {}
    daemon: dict[str, Any] = {"running": False, "pid": None, "uptime_seconds": None,
                              "command": None}
    if holder is not None:
        daemon = {"running": holder.command == "run", "pid": holder.pid,
                  "uptime_seconds": _uptime(holder.started_at, clock.now()),
                  "command": holder.command}
    # The API answers when the daemon runs and its socket is there (hooks, MCP, the CLI).
    daemon["api_socket"] = str(settings.socket_path)
    daemon["api_listening"] = bool(daemon["running"]) and settings.socket_path.is_socket()
    report: dict[str, Any] = {
        "daemon": daemon,
        "state_dir": str(settings.state_dir),
        "database": {"path": str(settings.database_path), "exists": False, "size_bytes": 0},
        "last_error": runtime.get("last_error"),
        "last_error_at": runtime.get("last_error_at"),
        "last_pass_at": runtime.get("last_pass_at"),
    }
    sources = [
        {"kind": s.kind.value, "root": str(s.root), "enabled": s.enabled,
         "exists": s.root.is_dir(), "files": 0, "sessions": 0, "messages": 0}
        for s in settings.sources
    ]
    report["sources"] = sources
    report["retention"] = retention_summary(settings)
    report["memory"] = await _memory_status(settings, clock, memory,
                                            runtime if daemon["running"] else None)
    db = settings.database_path
    totals: dict[str, Any] | None = None
    offsets: list[tuple[str, str, int, bool]] = []
    if db.exists():
        conn = await connect(db, readonly=True)
        try:
            if await _has_schema(conn):
                totals = await queries.totals(conn, shown_as_of(
                    clock.now(), settings.stale_session_timeout))
                offsets = await queries.file_offsets(conn)
                report["distill"] = await _distill_status(conn, settings, clock)
        finally:
            await conn.close()
    if totals is None:
        if db.exists():  # its creation was cut short (a full disk, say): nothing in it yet
            report["database"].update(exists=True, detail="not initialised")
        report.update(sessions=0, messages=0, unsynced_messages=0, rejected_lines=0,
                      skipped_lines=0, sessions_by_status={},
                      **_lag([], set(), settings, clock.now().timestamp()))
        return report
    size = sum(
        os.stat(p).st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists()
    )
    report["database"] = {"path": str(db), "exists": True, "size_bytes": size}
    by_source = totals.pop("sources")
    for entry in sources:
        counts = by_source.get(entry["kind"], {})
        entry["files"] = counts.get("files", 0)
        entry["sessions"] = counts.get("sessions", 0)
        entry["messages"] = counts.get("messages", 0)
    report.update(totals)
    report.update(_lag(offsets, {o[0] for o in offsets}, settings, clock.now().timestamp()))
    return report


async def _distill_status(conn: aiosqlite.Connection, settings: Settings,
                          clock: Clock) -> dict[str, Any] | None:
    """Distillation's provider, queue and spending today (None: off and never used)."""
    llm = settings.memory.llm
    if not await has_queue(conn):  # a database from before distillation, read-only here
        return None
    counts = await distill_counts(conn, clock.now())
    if not llm.enabled and not (counts["waiting"] or counts["done"] or counts["skipped"]):
        return None
    return {"provider": llm.provider, "model": llm.model or None,
            "daily_tokens": llm.daily_tokens, **counts}


def retention_summary(settings: Settings) -> dict[str, Any]:
    """What the daily retention job may delete, from the settings alone (cheap; `memoryd
    doctor` and `memoryd retention --dry-run` count what it would take now)."""
    policy = settings.retention
    periods = {"conversations": policy.conversations, "summaries": policy.summaries,
               "raw_messages": policy.raw_messages}
    return {"schedule": policy.schedule, "dry_run": policy.dry_run,
            "expires": {name: seconds for name, seconds in periods.items()
                        if seconds is not None},
            "kept_for_ever": [name for name, seconds in periods.items() if seconds is None]}
