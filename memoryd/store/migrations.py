"""Versioned schema migrations; each applies with its bookkeeping row in one transaction.

Table and column names of `sessions`, `session_messages` and
`session_message_state` are read by operators and other tools: never rename them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import aiosqlite
import structlog

from memoryd import sqlite
from memoryd.errors import StoreError
from memoryd.store.connection import translate

log = structlog.get_logger("memoryd.store")

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "sessions, messages, file state, rejected lines, summaries",
        """
        CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            source TEXT NOT NULL CHECK (source IN ('claude', 'codex', 'gemini')),
            external_id TEXT,
            parent_session_id INTEGER REFERENCES sessions(id),
            parent_external_id TEXT,
            project TEXT,
            transcript_path TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'ended')),
            started_at TEXT,
            last_message_at TEXT,
            last_ingested_at TEXT,
            memory_sync_index INTEGER NOT NULL DEFAULT 0,
            message_count INTEGER NOT NULL DEFAULT 0,
            summary_markdown TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX sessions_by_external_id ON sessions (source, external_id);
        CREATE INDEX sessions_by_parent_external_id ON sessions (parent_external_id)
            WHERE parent_session_id IS NULL AND parent_external_id IS NOT NULL;

        CREATE TABLE session_messages (
            id INTEGER PRIMARY KEY,
            session_id INTEGER NOT NULL REFERENCES sessions(id),
            message_index INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
            kind TEXT NOT NULL DEFAULT 'message',
            content TEXT NOT NULL,
            tool_name TEXT,
            tool_input TEXT,
            uuid TEXT,
            timestamp TEXT,
            is_sidechain INTEGER NOT NULL DEFAULT 0,
            raw BLOB NOT NULL,
            byte_offset INTEGER,
            dedupe_key TEXT NOT NULL,
            UNIQUE (session_id, message_index)
        );
        CREATE INDEX session_messages_by_dedupe_key ON session_messages (session_id, dedupe_key);

        CREATE TABLE session_message_state (
            path TEXT PRIMARY KEY,
            fingerprint TEXT NOT NULL,
            device INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            head_hash TEXT NOT NULL,
            head_length INTEGER NOT NULL,
            source TEXT NOT NULL,
            session_id INTEGER NOT NULL REFERENCES sessions(id),
            last_byte_offset INTEGER NOT NULL DEFAULT 0,
            last_message_index INTEGER NOT NULL DEFAULT -1,
            last_processed_at TEXT,
            marker_hash TEXT NOT NULL DEFAULT '',
            dedupe INTEGER NOT NULL DEFAULT 0,
            lines_read INTEGER NOT NULL DEFAULT 0,
            lines_skipped INTEGER NOT NULL DEFAULT 0,
            lines_rejected INTEGER NOT NULL DEFAULT 0,
            rewrites INTEGER NOT NULL DEFAULT 0,
            missing INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX session_message_state_by_inode ON session_message_state (device, inode);

        CREATE TABLE rejected_lines (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            session_id INTEGER REFERENCES sessions(id),
            byte_offset INTEGER NOT NULL,
            raw BLOB NOT NULL,
            reason TEXT NOT NULL,
            rejected_at TEXT NOT NULL,
            UNIQUE (path, byte_offset, raw)
        );

        CREATE TABLE session_summaries (
            id INTEGER PRIMARY KEY,
            session_id INTEGER NOT NULL REFERENCES sessions(id),
            kind TEXT NOT NULL,
            content TEXT NOT NULL,
            byte_offset INTEGER,
            recorded_at TEXT NOT NULL,
            UNIQUE (session_id, kind, content)
        );
        """,
    ),
    (
        2,
        "recovery bookkeeping: which summaries reached memory, sessions to sync",
        """
        ALTER TABLE session_summaries ADD COLUMN memory_synced_at TEXT;
        CREATE INDEX sessions_unsynced ON sessions (id) WHERE message_count > memory_sync_index;
        CREATE INDEX session_summaries_unsynced ON session_summaries (session_id)
            WHERE memory_synced_at IS NULL;
        """,
    ),
    (
        3,
        "what was injected into which agent session (hooks, MCP): when, which memories, how much",
        """
        CREATE TABLE injections (
            id INTEGER PRIMARY KEY,
            injected_at TEXT NOT NULL,
            agent TEXT NOT NULL,
            agent_session_id TEXT,
            interface TEXT NOT NULL,
            event TEXT NOT NULL,
            project TEXT,
            memory_ids TEXT NOT NULL,
            chars INTEGER NOT NULL
        );
        CREATE INDEX injections_by_session ON injections (agent_session_id, injected_at);
        """,
    ),
    (
        4,
        "the audit trail: every read and write of memory, never its content",
        """
        CREATE TABLE audit_events (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            interface TEXT NOT NULL,
            action TEXT NOT NULL,
            outcome TEXT NOT NULL,
            agent TEXT,
            agent_session_id TEXT,
            memory_ids TEXT NOT NULL DEFAULT '[]',
            count INTEGER,
            detail TEXT
        );
        CREATE INDEX audit_events_by_time ON audit_events (at);
        CREATE TABLE audit_memory_ids (
            event_id INTEGER NOT NULL REFERENCES audit_events (id) ON DELETE CASCADE,
            memory_id TEXT NOT NULL
        );
        CREATE INDEX audit_memory_ids_by_memory ON audit_memory_ids (memory_id, event_id);
        """,
    ),
    (
        5,
        "legal holds: projects and sessions no deletion may touch",
        """
        CREATE TABLE legal_holds (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('project', 'session')),
            value TEXT NOT NULL,
            session_id INTEGER,
            reason TEXT,
            created_at TEXT NOT NULL,
            UNIQUE (kind, value)
        );
        """,
    ),
    (
        6,
        "project links: a renamed folder's old path saves and recalls as its new one",
        """
        CREATE TABLE project_links (
            old_path TEXT PRIMARY KEY,
            new_path TEXT NOT NULL,
            linked_at TEXT NOT NULL
        );
        """,
    ),
    (
        7,
        "forgotten content: message keys, sessions and projects a person had forgotten",
        """
        CREATE TABLE forgotten_content (
            kind TEXT NOT NULL
                CHECK (kind IN ('message', 'summary', 'session', 'agent_session', 'project',
                                'everything')),
            value TEXT NOT NULL,
            forgotten_at TEXT NOT NULL,
            PRIMARY KEY (kind, value)
        ) WITHOUT ROWID;
        """,
    ),
    (
        8,
        "session digests: how far each session's digest reaches, its git branch and worktree",
        """
        ALTER TABLE sessions ADD COLUMN digest_index INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN git_branch TEXT;
        ALTER TABLE sessions ADD COLUMN worktree TEXT;
        CREATE INDEX sessions_digest_due ON sessions (id) WHERE memory_sync_index > digest_index;
        CREATE TABLE upgrades (
            name TEXT PRIMARY KEY,
            position INTEGER NOT NULL DEFAULT 0,
            changed INTEGER NOT NULL DEFAULT 0,
            started_at TEXT,
            done_at TEXT
        );
        """,
    ),    (
        9,
        "distillation: the segments waiting for a model, and the tokens spent each day",
        """
        CREATE TABLE distill_queue (
            segment_id TEXT PRIMARY KEY,
            session_id INTEGER NOT NULL REFERENCES sessions(id),
            first_index INTEGER NOT NULL,
            last_index INTEGER NOT NULL,
            queued_at TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'answered', 'done', 'skipped')),
            attempts INTEGER NOT NULL DEFAULT 0,
            answer TEXT,
            tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0,
            stored INTEGER NOT NULL DEFAULT 0,
            duplicates INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            done_at TEXT
        ) WITHOUT ROWID;
        CREATE INDEX distill_queue_waiting ON distill_queue (queued_at)
            WHERE state IN ('pending', 'answered');
        CREATE TABLE distill_usage (
            day TEXT PRIMARY KEY,
            calls INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            last_error_at TEXT
        ) WITHOUT ROWID;
        """,
    ),
    (
        10,
        "the active sessions indexed: the lifecycle check reads them, not every session",
        # Every minute it read the whole table, which also filled the connection's page
        # cache of an idle daemon again (2 MB with 10,000 sessions).
        """
        CREATE INDEX sessions_active ON sessions (id) WHERE status = 'active';
        """,
    ),
    (
        11,
        "sessions indexed by agent and start: a fork finds the session it copied",
        # A forked session begins with the conversation it copied, first message and
        # all, so it starts when that session did (`sessions.Copies`): one seek a
        # session instead of a look at every session.
        """
        CREATE INDEX sessions_by_start ON sessions (source, started_at);
        """,
    ),
    (
        12,
        "sessions: the session whose conversation a transcript copies before its own",
        # Codex's `fork` before 0.16x wrote the forked rollout again at the head of the
        # fork's, under the original's own header (`sessions.Copies`).
        """
        ALTER TABLE sessions ADD COLUMN copied_from TEXT;
        """,
    ),
    (
        13,
        "Claude Code's API errors are not the agent's words: kind api_error, digests again",
        # Written in the agent's name when a request to the model failed ("API Error: 400
        # ...", "You've hit your session limit ..."): a digest took one for what the
        # session concluded. Stored rows are told by their line (only a short message's
        # line is read: a store's long lines are not); their sessions' digests are built
        # again (a new version).
        """
        CREATE TEMP TABLE api_errors AS
            SELECT m.id, m.session_id FROM session_messages m
            JOIN sessions s ON s.id = m.session_id AND s.source = 'claude'
            WHERE m.role = 'assistant' AND m.kind = 'message'
            AND length(CAST(m.content AS BLOB)) < 4000
            AND instr(CAST(m.raw AS BLOB), CAST('"isApiErrorMessage":true' AS BLOB)) > 0
            AND json_valid(CAST(m.raw AS TEXT))
            AND json_extract(CAST(m.raw AS TEXT), '$.isApiErrorMessage') = 1;
        UPDATE session_messages SET kind = 'api_error'
            WHERE id IN (SELECT id FROM temp.api_errors);
        UPDATE sessions SET digest_index = 0
            WHERE id IN (SELECT session_id FROM temp.api_errors);
        DROP TABLE temp.api_errors;
        """,
    ),
    (
        14,
        "messages: a key of what each says, so that forgetting holds for a rewritten copy",
        # Filled as messages are stored; a row stored before has its key computed when it
        # is forgotten (`forgotten.remember_forgotten`).
        """
        ALTER TABLE session_messages ADD COLUMN content_key TEXT;
        """,
    ),
    (
        15,
        "clock marks: the wall clock and the boot clock when deletions by age last ran",
        """
        CREATE TABLE clock_marks (
            name TEXT PRIMARY KEY,
            wall TEXT NOT NULL,
            boot_id TEXT,
            boot_seconds REAL
        );
        """,
    ),
    (
        16,
        "rewinds: where an agent's transcript went back to an earlier message (Gemini CLI's"
        " /rewind), so the messages it discarded are left out of memory and digests",
        """
        CREATE TABLE session_rewinds (
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            first_index INTEGER NOT NULL,
            byte_offset INTEGER NOT NULL,
            recorded_at TEXT NOT NULL,
            PRIMARY KEY (session_id, byte_offset)
        );
        """,
    ),
]


def _too_new(version: int, latest: int) -> StoreError:
    return StoreError(f"the state database is at schema version {version}, newer than this"
                      f" memoryd knows ({latest}); upgrade memoryd")


async def migrate(conn: aiosqlite.Connection, now: datetime | None = None) -> int:
    """Apply every migration newer than the database; returns the resulting version."""
    return await sqlite.migrate(
        conn, MIGRATIONS, applied_at=(now or datetime.now(UTC)).isoformat(),
        translate=translate, too_new=_too_new, event="migration_applied")
