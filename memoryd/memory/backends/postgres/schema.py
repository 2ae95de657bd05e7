"""The PostgreSQL memory store's database: connecting, versioned migrations, errors.

Schema, version 1 (every table carries its owner; every query filters by it):

- `memories`: one row per memory version, as in the embedded backend, plus the
  owner columns `owner_user` (whose memory), `owner_agent` (the agent that
  wrote it: claude, codex, gemini, or `person`) and `origin` (the memoryd, one
  per state directory, that saved it: daemon-local session ids mean something
  only together with it). `project` is the third owner column. Ids are unique
  per user. `tsv` is the full-text vector of content and tags (GIN).
- `memory_chunks`: each memory cut into retrieval units (`chunks.py`) with their
  own `tsv` (GIN) and, once the background job reached them, an `embedding`
  (pgvector) and the `model` that made it. One HNSW index (cosine) per model's
  dimension is made when a backend with that embedder opens.
- `memory_deletions`: the audit trail of forgets; never holds content.
- (v2) `memory_chunks.owner_user` and `.project`, copies of their memory's (which
  never change: a correction is a new memory), indexed, so that a project's
  keyword search intersects the full-text index with the project's chunks
  (100,000 memories: p50 98 ms -> see docs/performance.md) instead of ranking
  every chunk of every project that holds a query word.
- `forgotten_scopes`: sessions and projects whose later memories are never saved.
- `schema_migrations`: this file's own bookkeeping. Migrations run under an
  advisory lock, so daemons starting together apply each one once.

Connection strings come from an environment variable named in the settings and
never appear in logs, errors or status: `describe` gives host, port and database
only, and `sanitize` strips the password from any driver message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.errors import BackendError, BackendUnavailable

if TYPE_CHECKING:
    import psycopg

log = structlog.get_logger("memoryd.memory.postgres")

BACKEND_NAME = "postgres"
# pg_advisory_xact_lock key for migrations: "memoryd" in ASCII.
MIGRATION_LOCK = 0x6D656D6F727964

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "memories with owner columns, chunks with full-text and vectors, deletions, scopes",
        """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE memories (
            seq bigserial PRIMARY KEY,
            owner_user text NOT NULL,
            owner_agent text NOT NULL,
            origin text NOT NULL,
            id text NOT NULL,
            type text NOT NULL CHECK (type IN
                ('fact', 'correction', 'conversation', 'session_summary', 'project_context')),
            content text NOT NULL,
            importance double precision NOT NULL CHECK (importance >= 0 AND importance <= 1),
            project text,
            tags text[] NOT NULL DEFAULT '{}',
            tags_text text NOT NULL DEFAULT '',
            session_id bigint,
            session_external_id text,
            source text,
            source_project text,
            first_index bigint,
            last_index bigint,
            message_uuids text[] NOT NULL DEFAULT '{}',
            started_at timestamptz,
            ended_at timestamptz,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            supersedes text,
            superseded_by text,
            reason text,
            deleted_at timestamptz,
            access_count integer NOT NULL DEFAULT 0,
            last_accessed_at timestamptz,
            tsv tsvector GENERATED ALWAYS AS
                (to_tsvector('english'::regconfig, content || ' ' || tags_text)) STORED,
            UNIQUE (owner_user, id)
        );
        CREATE INDEX memories_live_by_owner ON memories (owner_user, project)
            WHERE deleted_at IS NULL AND superseded_by IS NULL;
        CREATE INDEX memories_by_session ON memories (owner_user, origin, session_id);
        CREATE INDEX memories_by_session_external_id
            ON memories (owner_user, session_external_id);
        CREATE INDEX memories_by_supersedes ON memories (supersedes);
        CREATE INDEX memories_tsv ON memories USING gin (tsv);

        CREATE TABLE memory_chunks (
            seq bigserial PRIMARY KEY,
            memory_seq bigint NOT NULL REFERENCES memories (seq) ON DELETE CASCADE,
            ordinal integer NOT NULL,
            start_char integer NOT NULL,
            end_char integer NOT NULL,
            content text NOT NULL,
            first_index bigint,
            last_index bigint,
            message_uuids text[] NOT NULL DEFAULT '{}',
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
            model text,
            embedding vector,
            UNIQUE (memory_seq, ordinal)
        );
        CREATE INDEX memory_chunks_tsv ON memory_chunks USING gin (tsv);
        CREATE INDEX memory_chunks_pending ON memory_chunks (seq) WHERE embedding IS NULL;

        CREATE TABLE memory_deletions (
            seq bigserial PRIMARY KEY,
            owner_user text NOT NULL,
            origin text NOT NULL,
            memory_id text NOT NULL,
            mode text NOT NULL CHECK (mode IN ('soft', 'hard')),
            type text NOT NULL,
            project text,
            session_id bigint,
            session_external_id text,
            deleted_at timestamptz NOT NULL
        );
        CREATE INDEX memory_deletions_by_memory_id
            ON memory_deletions (owner_user, memory_id, mode);

        CREATE TABLE forgotten_scopes (
            owner_user text NOT NULL,
            kind text NOT NULL CHECK (kind IN ('session', 'session_id', 'project')),
            value text NOT NULL,
            forgotten_at timestamptz NOT NULL,
            PRIMARY KEY (owner_user, kind, value)
        );
        """,
    ),
    (
        2,
        "owner and project on chunks, so a project's keyword search reads that project only",
        """
        ALTER TABLE memory_chunks ADD COLUMN owner_user text;
        ALTER TABLE memory_chunks ADD COLUMN project text;
        UPDATE memory_chunks c SET owner_user = m.owner_user, project = m.project
            FROM memories m WHERE m.seq = c.memory_seq;
        ALTER TABLE memory_chunks ALTER COLUMN owner_user SET NOT NULL;
        CREATE INDEX memory_chunks_by_owner_project ON memory_chunks (owner_user, project);
        """,
    ),
    (
        3,
        "memories private to one agent of their owner",
        """
        ALTER TABLE memories ADD COLUMN private_to text;
        """,
    ),
    (
        4,
        "a session's segments found by their first message (a save's shorter saves)",
        """
        CREATE INDEX memories_by_session_first
            ON memories (owner_user, origin, session_id, first_index);
        """,
    ),
    (
        5,
        "session digests: a memory type of their own",
        """
        ALTER TABLE memories DROP CONSTRAINT memories_type_check;
        ALTER TABLE memories ADD CONSTRAINT memories_type_check CHECK (type IN
            ('fact', 'correction', 'conversation', 'session_summary', 'project_context',
             'session_digest'));
        """,
    ),
    (
        6,
        "observations read out of conversations by a model (distillation)",
        """
        ALTER TABLE memories DROP CONSTRAINT memories_type_check;
        ALTER TABLE memories ADD CONSTRAINT memories_type_check CHECK (type IN
            ('fact', 'correction', 'conversation', 'session_summary', 'project_context',
             'session_digest', 'observation'));
        """,
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]

_PASSWORD_IN_URL = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)([^@\s]*)(@)")
_PASSWORD_KEYWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def sanitize(message: str, *secrets: str | None) -> str:
    """`message` without any password: in URLs, `password=` pairs, or given verbatim."""
    text = _PASSWORD_IN_URL.sub(r"\1***\3", message)
    text = _PASSWORD_KEYWORD.sub(r"\1***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def password_of(dsn: str) -> str | None:
    """The password inside a connection string, so that messages can be cleaned of it."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # pragma: no cover - the extra is not installed
        return None
    try:
        value = conninfo_to_dict(dsn).get("password")
    except Exception:  # a malformed DSN is reported elsewhere, without its text
        return None
    return str(value) if value else None


def describe(dsn: str) -> str:
    """host:port/dbname of a connection string: what status and doctor may show."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:
        return "(unparsable connection string)"
    host = str(parts.get("host") or "localhost")
    port = str(parts.get("port") or "5432")
    return f"{host}:{port}/{parts.get('dbname') or parts.get('user') or ''}"


def translate(exc: BaseException, *secrets: str | None) -> BackendError:
    """A driver or pool error as a BackendError without secrets; lost connections,
    timeouts and a server shutting down or starting are transient."""
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg_pool import PoolTimeout

    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = sanitize(lines[0] if lines else type(exc).__name__, *secrets)
    transient: tuple[type[BaseException], ...] = (
        psycopg.OperationalError, PoolTimeout, TimeoutError, OSError,
        pg_errors.AdminShutdown, pg_errors.CannotConnectNow, pg_errors.SerializationFailure,
        pg_errors.DeadlockDetected, pg_errors.LockNotAvailable, pg_errors.QueryCanceled)
    if isinstance(exc, transient):
        return BackendUnavailable(text, backend=BACKEND_NAME)
    return BackendError(text, backend=BACKEND_NAME)


async def migrate(conn: psycopg.AsyncConnection[Any]) -> int:
    """Apply every newer migration, each with its bookkeeping row in one transaction."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY,"
            " description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
        row = await cur.fetchone()
        version = int(_first(row))
        if version > LATEST_VERSION:
            raise BackendError(
                f"memory database is at schema version {version}, newer than this memoryd"
                f" knows ({LATEST_VERSION}); upgrade memoryd", backend=BACKEND_NAME)
        for number, description, script in MIGRATIONS:
            if number <= version:
                continue
            for statement in _statements(script):
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO schema_migrations (version, description) VALUES (%s, %s)",
                (number, description))
            log.info("memory_migration_applied", backend=BACKEND_NAME, version=number,
                     description=description)
            version = number
    return version


def _first(row: Any) -> Any:
    if row is None:
        return 0
    if isinstance(row, dict):
        return next(iter(row.values()))
    return row[0]


def _statements(script: str) -> Iterable[str]:
    return (s.strip() for s in script.split(";") if s.strip())


def vector_literal(values: Iterable[float]) -> str:
    """A pgvector text literal, '[0.1,0.2,...]' (no client-side type adapter needed)."""
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"
