"""The embedded memory store's database: opening it privately, its migrations, its errors.

The memory store lives in its own file (e.g. `<state_dir>/memory.db`), apart from
the daemon's state, so it can be swapped or deleted without touching ingest.

Schema, version 1:

- `memories`: one row per memory version. `seq` is an integer alias of the rowid
  that never changes (the FTS index, and later a vector/chunk table keyed by
  integer rowid such as sqlite-vec's, point at it); `id` is the public hex id.
- `memories_fts`: an external-content FTS5 index (porter stemming over
  unicode61) of `content` and `tags`, kept in sync by triggers.
- `memory_deletions`: the audit trail of forgets; never holds content.
- `schema_migrations`: this file's own migration bookkeeping.

Version 2 (hybrid search):

- `memory_chunks`: each memory cut into retrieval units (`chunks.py`): offsets
  into the content, the chunk text, and the message range and uuids it covers.
  Written in the same transaction as the memory; deleted with it by trigger.
- `memory_chunks_fts`: FTS5 over chunk text, kept in sync by triggers.
- `chunk_vectors`: one float32 vector per chunk and the model that made it,
  filled in the background by `embed_pending`; deleted with its chunk.

Version 3 (recall inside a project without ranking the rest of the store):

- `memory_projects`: a small integer id per project, filled by trigger.
- `memory_chunks.scope`: `p<id>` of the chunk's memory's project, `p0` for a
  memory without one (found from every project). It is a second column of
  `memory_chunks_fts`, so a project's recall MATCHes `scope:(p<id> OR p0)`
  together with its words and FTS5 ranks only that project's chunks. The token
  is a letter and digits, which the porter stemmer leaves alone. A memory's
  project never changes (a correction is a new memory), so neither does its
  chunks' scope.

Version 7 drops `memories_fts`: every memory is chunked, recall with words goes
through `memory_chunks_fts`, and indexing each text twice cost a third of a
conversation segment's save.

Version 9 indexes memories by (session, first message): a save looks for the shorter
saves of its messages (`_SHORTER_TAILS`), and by session alone that read every segment
of the session, once per segment saved, so one session of 500,000 messages synced at
180 messages/s (issue 29.10).

Version 8 sets the chunk index's `automerge` to 8 (FTS5's default is 4): FTS5 then
merges a level's segments once eight are there, which cut a 1,000,000-message
recovery's index work by a tenth; a query reads a few more segments.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiosqlite
import structlog

from memoryd import sqlite
from memoryd.errors import BackendDamaged, BackendError, BackendUnavailable
from memoryd.files import make_dirs

log = structlog.get_logger("memoryd.memory.sqlite")

BACKEND_NAME = "sqlite"

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "memories, FTS5 index with sync triggers, deletion audit",
        """
        CREATE TABLE memories (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            type TEXT NOT NULL CHECK (type IN
                ('fact', 'correction', 'conversation', 'session_summary', 'project_context')),
            content TEXT NOT NULL,
            importance REAL NOT NULL CHECK (importance >= 0 AND importance <= 1),
            project TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            tags_text TEXT NOT NULL DEFAULT '',
            session_id INTEGER,
            session_external_id TEXT,
            source TEXT,
            source_project TEXT,
            first_index INTEGER,
            last_index INTEGER,
            message_uuids TEXT NOT NULL DEFAULT '[]',
            started_at TEXT,
            ended_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            supersedes TEXT,
            superseded_by TEXT,
            reason TEXT,
            deleted_at TEXT,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT
        );
        CREATE INDEX memories_live_by_project ON memories (project)
            WHERE deleted_at IS NULL AND superseded_by IS NULL;
        CREATE INDEX memories_by_session_id ON memories (session_id);
        CREATE INDEX memories_by_session_external_id ON memories (session_external_id);
        CREATE INDEX memories_by_supersedes ON memories (supersedes);
        CREATE INDEX memories_by_span ON memories (
            COALESCE(started_at, created_at), COALESCE(ended_at, started_at, created_at));

        CREATE VIRTUAL TABLE memories_fts USING fts5(
            content, tags_text,
            content='memories', content_rowid='seq',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
            INSERT INTO memories_fts (rowid, content, tags_text)
                VALUES (new.seq, new.content, new.tags_text);
        END;
        CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
            INSERT INTO memories_fts (memories_fts, rowid, content, tags_text)
                VALUES ('delete', old.seq, old.content, old.tags_text);
        END;
        CREATE TRIGGER memories_fts_update AFTER UPDATE OF content, tags_text ON memories BEGIN
            INSERT INTO memories_fts (memories_fts, rowid, content, tags_text)
                VALUES ('delete', old.seq, old.content, old.tags_text);
            INSERT INTO memories_fts (rowid, content, tags_text)
                VALUES (new.seq, new.content, new.tags_text);
        END;

        CREATE TABLE memory_deletions (
            seq INTEGER PRIMARY KEY,
            memory_id TEXT NOT NULL,
            mode TEXT NOT NULL CHECK (mode IN ('soft', 'hard')),
            type TEXT NOT NULL,
            project TEXT,
            session_id INTEGER,
            session_external_id TEXT,
            deleted_at TEXT NOT NULL
        );
        CREATE INDEX memory_deletions_by_memory_id ON memory_deletions (memory_id, mode);
        """,
    ),
    (
        2,
        "chunks of memories with their own FTS5 index, chunk vectors",
        """
        CREATE TABLE memory_chunks (
            seq INTEGER PRIMARY KEY,
            memory_seq INTEGER NOT NULL,
            ordinal INTEGER NOT NULL,
            start_char INTEGER NOT NULL,
            end_char INTEGER NOT NULL,
            content TEXT NOT NULL,
            first_index INTEGER,
            last_index INTEGER,
            message_uuids TEXT NOT NULL DEFAULT '[]',
            UNIQUE (memory_seq, ordinal)
        );
        CREATE VIRTUAL TABLE memory_chunks_fts USING fts5(
            content,
            content='memory_chunks', content_rowid='seq',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER memory_chunks_fts_insert AFTER INSERT ON memory_chunks BEGIN
            INSERT INTO memory_chunks_fts (rowid, content) VALUES (new.seq, new.content);
        END;
        CREATE TRIGGER memory_chunks_fts_delete AFTER DELETE ON memory_chunks BEGIN
            INSERT INTO memory_chunks_fts (memory_chunks_fts, rowid, content)
                VALUES ('delete', old.seq, old.content);
            DELETE FROM chunk_vectors WHERE chunk_seq = old.seq;
        END;
        CREATE TRIGGER memories_chunks_delete AFTER DELETE ON memories BEGIN
            DELETE FROM memory_chunks WHERE memory_seq = old.seq;
        END;
        CREATE TABLE chunk_vectors (
            chunk_seq INTEGER PRIMARY KEY,
            model TEXT NOT NULL,
            vector BLOB NOT NULL
        );
        """,
    ),
    (
        3,
        "project scope tokens in the chunk index, so keyword recall stays inside a project",
        """
        CREATE TABLE memory_projects (
            id INTEGER PRIMARY KEY,
            project TEXT NOT NULL UNIQUE
        );
        INSERT OR IGNORE INTO memory_projects (project)
            SELECT DISTINCT project FROM memories WHERE project IS NOT NULL ORDER BY project;
        CREATE TRIGGER memories_project_insert AFTER INSERT ON memories
            WHEN new.project IS NOT NULL BEGIN
            INSERT OR IGNORE INTO memory_projects (project) VALUES (new.project);
        END;
        ALTER TABLE memory_chunks ADD COLUMN scope TEXT NOT NULL DEFAULT 'p0';
        UPDATE memory_chunks SET scope = COALESCE((
            SELECT 'p' || mp.id FROM memories m JOIN memory_projects mp ON mp.project = m.project
            WHERE m.seq = memory_chunks.memory_seq), 'p0');
        DROP TRIGGER memory_chunks_fts_insert;
        DROP TRIGGER memory_chunks_fts_delete;
        DROP TABLE memory_chunks_fts;
        CREATE VIRTUAL TABLE memory_chunks_fts USING fts5(
            content, scope,
            content='memory_chunks', content_rowid='seq',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        INSERT INTO memory_chunks_fts (memory_chunks_fts) VALUES ('rebuild');
        CREATE TRIGGER memory_chunks_fts_insert AFTER INSERT ON memory_chunks BEGIN
            INSERT INTO memory_chunks_fts (rowid, content, scope)
                VALUES (new.seq, new.content, new.scope);
        END;
        CREATE TRIGGER memory_chunks_fts_delete AFTER DELETE ON memory_chunks BEGIN
            INSERT INTO memory_chunks_fts (memory_chunks_fts, rowid, content, scope)
                VALUES ('delete', old.seq, old.content, old.scope);
            DELETE FROM chunk_vectors WHERE chunk_seq = old.seq;
        END;
        """,
    ),
    (
        4,
        "access counts are real uses (opened by id), no longer recall returns",
        """
        UPDATE memories SET access_count = 0, last_accessed_at = NULL;
        """,
    ),
    (
        5,
        "forgetting sticks: forgotten sessions and projects never come back",
        """
        CREATE TABLE forgotten_scopes (
            kind TEXT NOT NULL CHECK (kind IN ('session', 'session_id', 'project')),
            value TEXT NOT NULL,
            forgotten_at TEXT NOT NULL,
            PRIMARY KEY (kind, value)
        );
        """,
    ),
    (
        6,
        "isolation: the store's owner, memories private to one agent",
        """
        CREATE TABLE store_owner (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            user TEXT NOT NULL,
            claimed_at TEXT NOT NULL
        );
        ALTER TABLE memories ADD COLUMN private_to TEXT;
        """,
    ),
    (
        7,
        "memory text indexed once: the chunk index finds every memory",
        """
        DROP TRIGGER memories_fts_insert;
        DROP TRIGGER memories_fts_delete;
        DROP TRIGGER memories_fts_update;
        DROP TABLE memories_fts;
        """,
    ),
    (
        8,
        "the chunk index merges its segments eight at a time",
        """
        INSERT INTO memory_chunks_fts (memory_chunks_fts, rank) VALUES ('automerge', 8);
        """,
    ),
    (
        9,
        "a session's segments found by their first message",
        """
        CREATE INDEX memories_by_session_first ON memories (session_id, first_index);
        """,
    ),
    (
        10,
        "session digests: a memory type of their own",
        """
        CREATE TABLE memories_new (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            type TEXT NOT NULL CHECK (type IN
                ('fact', 'correction', 'conversation', 'session_summary', 'project_context',
                 'session_digest')),
            content TEXT NOT NULL,
            importance REAL NOT NULL CHECK (importance >= 0 AND importance <= 1),
            project TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            tags_text TEXT NOT NULL DEFAULT '',
            session_id INTEGER,
            session_external_id TEXT,
            source TEXT,
            source_project TEXT,
            first_index INTEGER,
            last_index INTEGER,
            message_uuids TEXT NOT NULL DEFAULT '[]',
            started_at TEXT,
            ended_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            supersedes TEXT,
            superseded_by TEXT,
            reason TEXT,
            deleted_at TEXT,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT,
            private_to TEXT
        );
        INSERT INTO memories_new (
            seq, id, type, content, importance, project, tags, tags_text, session_id,
            session_external_id, source, source_project, first_index, last_index,
            message_uuids, started_at, ended_at, created_at, updated_at, supersedes,
            superseded_by, reason, deleted_at, access_count, last_accessed_at, private_to)
            SELECT
            seq, id, type, content, importance, project, tags, tags_text, session_id,
            session_external_id, source, source_project, first_index, last_index,
            message_uuids, started_at, ended_at, created_at, updated_at, supersedes,
            superseded_by, reason, deleted_at, access_count, last_accessed_at, private_to
            FROM memories;
        DROP TRIGGER memories_chunks_delete;
        DROP TRIGGER memories_project_insert;
        DROP TABLE memories;
        ALTER TABLE memories_new RENAME TO memories;
        CREATE INDEX memories_live_by_project ON memories (project)
            WHERE deleted_at IS NULL AND superseded_by IS NULL;
        CREATE INDEX memories_by_session_id ON memories (session_id);
        CREATE INDEX memories_by_session_external_id ON memories (session_external_id);
        CREATE INDEX memories_by_supersedes ON memories (supersedes);
        CREATE INDEX memories_by_span ON memories (
            COALESCE(started_at, created_at), COALESCE(ended_at, started_at, created_at));
        CREATE INDEX memories_by_session_first ON memories (session_id, first_index);
        CREATE TRIGGER memories_chunks_delete AFTER DELETE ON memories BEGIN
            DELETE FROM memory_chunks WHERE memory_seq = old.seq;
        END;
        CREATE TRIGGER memories_project_insert AFTER INSERT ON memories
            WHEN new.project IS NOT NULL BEGIN
            INSERT OR IGNORE INTO memory_projects (project) VALUES (new.project);
        END;
        """,
    ),
    (
        11,
        "the live-memory index holds private_to, so recall's filter reads no memory row",
        # Every recall filters on private_to (another agent's private memories never
        # come back); outside the index, the vector channel's list of allowed memories
        # read each of a project's rows for it (at 100,000 memories: 1.5 -> 11 ms).
        """
        DROP INDEX memories_live_by_project;
        CREATE INDEX memories_live_by_project ON memories (project, private_to)
            WHERE deleted_at IS NULL AND superseded_by IS NULL;
        """,
    ),
    (
        12,
        "observations read out of conversations by a model (distillation): a type of"
        " their own",
        """
        CREATE TABLE memories_new (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            type TEXT NOT NULL CHECK (type IN
                ('fact', 'correction', 'conversation', 'session_summary', 'project_context',
                 'session_digest', 'observation')),
            content TEXT NOT NULL,
            importance REAL NOT NULL CHECK (importance >= 0 AND importance <= 1),
            project TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            tags_text TEXT NOT NULL DEFAULT '',
            session_id INTEGER,
            session_external_id TEXT,
            source TEXT,
            source_project TEXT,
            first_index INTEGER,
            last_index INTEGER,
            message_uuids TEXT NOT NULL DEFAULT '[]',
            started_at TEXT,
            ended_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            supersedes TEXT,
            superseded_by TEXT,
            reason TEXT,
            deleted_at TEXT,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT,
            private_to TEXT
        );
        INSERT INTO memories_new (
            seq, id, type, content, importance, project, tags, tags_text, session_id,
            session_external_id, source, source_project, first_index, last_index,
            message_uuids, started_at, ended_at, created_at, updated_at, supersedes,
            superseded_by, reason, deleted_at, access_count, last_accessed_at, private_to)
            SELECT
            seq, id, type, content, importance, project, tags, tags_text, session_id,
            session_external_id, source, source_project, first_index, last_index,
            message_uuids, started_at, ended_at, created_at, updated_at, supersedes,
            superseded_by, reason, deleted_at, access_count, last_accessed_at, private_to
            FROM memories;
        DROP TRIGGER memories_chunks_delete;
        DROP TRIGGER memories_project_insert;
        DROP TABLE memories;
        ALTER TABLE memories_new RENAME TO memories;
        CREATE INDEX memories_live_by_project ON memories (project, private_to)
            WHERE deleted_at IS NULL AND superseded_by IS NULL;
        CREATE INDEX memories_by_session_id ON memories (session_id);
        CREATE INDEX memories_by_session_external_id ON memories (session_external_id);
        CREATE INDEX memories_by_supersedes ON memories (supersedes);
        CREATE INDEX memories_by_span ON memories (
            COALESCE(started_at, created_at), COALESCE(ended_at, started_at, created_at));
        CREATE INDEX memories_by_session_first ON memories (session_id, first_index);
        CREATE TRIGGER memories_chunks_delete AFTER DELETE ON memories BEGIN
            DELETE FROM memory_chunks WHERE memory_seq = old.seq;
        END;
        CREATE TRIGGER memories_project_insert AFTER INSERT ON memories
            WHEN new.project IS NOT NULL BEGIN
            INSERT OR IGNORE INTO memory_projects (project) VALUES (new.project);
        END;
        """,
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]


def translate(exc: sqlite3.Error) -> BackendError:
    """A sqlite3 error as a BackendError; locked or full databases are transient."""
    kind = sqlite.kind_of(exc)
    if kind is sqlite.Kind.DAMAGED:
        return BackendDamaged(f"{exc} (stop memoryd and run `memoryd rebuild-memory`;"
                              " docs/operations.md)", backend=BACKEND_NAME)
    if kind is sqlite.Kind.TRANSIENT:
        return BackendUnavailable(str(exc), backend=BACKEND_NAME)
    return BackendError(str(exc), backend=BACKEND_NAME)


make_private = sqlite.make_private


async def connect(path: Path, *, busy_timeout: float = 5.0,
                  then: Callable[[aiosqlite.Connection], Awaitable[None]] | None = None,
                  readonly: bool = False) -> aiosqlite.Connection:
    """Open (creating it 0600) the memory database: WAL, busy timeout, secure delete
    (forgotten content is overwritten with zeros rather than left in free pages);
    `readonly`: as it is, for reading only (a full disk, where nothing can be written)."""
    if readonly:
        # Immutable: a reader where no daemon runs and nothing can be written (no `-shm`).
        return await sqlite.connect(path, translate=translate, then=then, readonly=True,
                                    immutable=True,
                                    pragmas=[f"busy_timeout = {int(busy_timeout * 1000)}"])
    try:
        if not path.parent.exists():
            make_dirs(path.parent)
        sqlite.create_private(path)
    except OSError as exc:
        raise BackendUnavailable(f"{path}: {exc.strerror or exc}", backend=BACKEND_NAME) from exc
    return await sqlite.connect(
        path, translate=translate, then=then,
        pragmas=[f"busy_timeout = {int(busy_timeout * 1000)}", "journal_mode = WAL",
                 "synchronous = NORMAL", "secure_delete = ON"])


def _too_new(version: int, latest: int) -> BackendError:
    return BackendError(f"memory database is at schema version {version}, newer than this "
                        f"memoryd knows ({latest}); upgrade memoryd", backend=BACKEND_NAME)


async def migrate(conn: aiosqlite.Connection, applied_at: str) -> int:
    """Apply every newer migration, each with its bookkeeping row in one transaction."""
    return await sqlite.migrate(conn, MIGRATIONS, applied_at=applied_at, translate=translate,
                                too_new=_too_new, event="memory_migration_applied")
