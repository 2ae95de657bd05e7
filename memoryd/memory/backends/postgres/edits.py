"""This owner's stored memories changed in place: a longer save superseding a shorter
tail, one live digest a session and one live observation replacing another, text
rewritten with its chunks, evidence grown, and projects relabelled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memoryd.memory import writes
from memoryd.memory.backends.postgres.connection import fetch_all
from memoryd.memory.backends.postgres.owner import Owner
from memoryd.memory.backends.postgres.rows import insert_chunks, row_memory
from memoryd.memory.models import ConversationSegment, Memory

if TYPE_CHECKING:
    import psycopg

#: A session's live digests other than `%(id)s`, the one covering the most messages last.
LIVE_DIGESTS = """
    SELECT id, last_index FROM memories
    WHERE owner_user = %(user)s AND origin = %(origin)s AND type = 'session_digest'
      AND id <> %(id)s AND superseded_by IS NULL AND deleted_at IS NULL
      AND session_id IS NOT DISTINCT FROM %(session_id)s
      AND session_external_id IS NOT DISTINCT FROM %(external)s
      AND source IS NOT DISTINCT FROM %(source)s
    ORDER BY COALESCE(last_index, -1), seq
    FOR UPDATE
"""


async def supersede_tails(conn: psycopg.AsyncConnection[Any], owner: Owner,
                          segment: ConversationSegment, now: datetime) -> None:
    """`segment` supersedes the live shorter saves of its messages (see the embedded
    backend's `save_conversation_segment`)."""
    tails = await fetch_all(
        conn,
        "SELECT id FROM memories WHERE owner_user = %(user)s AND origin = %(origin)s"
        " AND type = 'conversation' AND id <> %(id)s AND superseded_by IS NULL"
        " AND deleted_at IS NULL AND session_id IS NOT DISTINCT FROM %(session)s"
        " AND session_external_id IS NOT DISTINCT FROM %(external)s"
        " AND source IS NOT DISTINCT FROM %(source)s AND first_index = %(first)s"
        " AND last_index < %(last)s ORDER BY last_index",
        {"user": owner.user, "origin": owner.origin, "id": segment.id,
         "session": segment.session_id, "external": segment.session_external_id,
         "source": segment.source, "first": segment.first_index,
         "last": segment.last_index})
    if tails:
        await conn.execute(
            "UPDATE memories SET superseded_by = %s, updated_at = %s,"
            " reason = 'extended by a later save of the same messages'"
            " WHERE owner_user = %s AND id = ANY(%s)",
            (segment.id, now, owner.user, [t["id"] for t in tails]))
        await conn.execute(
            "UPDATE memories SET supersedes = %s WHERE owner_user = %s AND id = %s",
            (tails[-1]["id"], owner.user, segment.id))


async def supersede_observation(conn: psycopg.AsyncConnection[Any], owner: Owner,
                                new: Memory, now: datetime) -> None:
    """See the embedded backend's `supersede_observation`."""
    cursor = await conn.execute(
        "UPDATE memories SET superseded_by = %s, updated_at = %s WHERE owner_user = %s"
        " AND id = %s AND type = 'observation' AND superseded_by IS NULL"
        " AND deleted_at IS NULL",
        (new.id, now, owner.user, new.supersedes))
    if cursor.rowcount == 0:
        await conn.execute("UPDATE memories SET supersedes = NULL WHERE owner_user = %s"
                           " AND id = %s", (owner.user, new.id))


async def supersede_digests(conn: psycopg.AsyncConnection[Any], owner: Owner, new: Memory,
                            now: datetime) -> None:
    """One live digest a session (see the embedded backend's `supersede_digests`)."""
    p = new.provenance
    live = await fetch_all(conn, LIVE_DIGESTS, {
        "user": owner.user, "origin": owner.origin, "id": new.id,
        "session_id": p.session_id, "external": p.session_external_id,
        "source": p.source})
    newer = [r for r in live if (r["last_index"] or -1) > (p.last_index or -1)]
    if newer:
        await conn.execute(
            "UPDATE memories SET superseded_by = %s, updated_at = %s"
            " WHERE owner_user = %s AND id = %s",
            (newer[-1]["id"], now, owner.user, new.id))
        return
    older = [r["id"] for r in live]
    if not older:
        return
    await conn.execute(
        "UPDATE memories SET superseded_by = %s, updated_at = %s"
        " WHERE owner_user = %s AND id = ANY(%s)", (new.id, now, owner.user, older))
    await conn.execute("UPDATE memories SET supersedes = %s WHERE owner_user = %s AND id = %s",
                       (older[-1], owner.user, new.id))


async def rewrite_content(conn: psycopg.AsyncConnection[Any], owner: Owner, memory_id: str,
                          content: str, now: datetime) -> bool:
    rows = await fetch_all(
        conn, "SELECT * FROM memories WHERE owner_user = %s AND id = %s"
        " AND deleted_at IS NULL AND superseded_by IS NULL FOR UPDATE",
        (owner.user, memory_id))
    if not rows or rows[0]["content"] == content:
        return False
    seq = rows[0]["seq"]
    memory = replace(row_memory(rows[0]), content=content)
    await conn.execute("DELETE FROM memory_chunks WHERE memory_seq = %s", (seq,))
    await conn.execute("UPDATE memories SET content = %s, updated_at = %s WHERE seq = %s",
                       (content, now, seq))
    await insert_chunks(conn, owner, seq, memory)
    return True


async def add_evidence(conn: psycopg.AsyncConnection[Any], owner: Owner, memory_id: str,
                       message_uuids: Sequence[str], now: datetime) -> bool:
    rows = await fetch_all(
        conn, "SELECT message_uuids FROM memories WHERE owner_user = %s AND id = %s"
        " AND deleted_at IS NULL AND superseded_by IS NULL FOR UPDATE",
        (owner.user, memory_id))
    if not rows:
        return False
    have = list(rows[0]["message_uuids"] or ())
    grown = writes.grow_evidence(have, message_uuids)
    if grown == have:
        return False
    await conn.execute(
        "UPDATE memories SET message_uuids = %s, updated_at = %s"
        " WHERE owner_user = %s AND id = %s",
        (grown, now, owner.user, memory_id))
    return True


async def relabel_project(conn: psycopg.AsyncConnection[Any], owner: Owner, old: str,
                          new: str) -> int:
    """This user's memories of project `old`, and their chunks, moved to `new`: how many."""
    cur = await conn.execute(
        "UPDATE memories SET project = %(new)s WHERE owner_user = %(user)s"
        " AND project = %(old)s", {"new": new, "old": old, "user": owner.user})
    moved = cur.rowcount
    await conn.execute(
        "UPDATE memory_chunks SET project = %(new)s WHERE owner_user = %(user)s"
        " AND project = %(old)s", {"new": new, "old": old, "user": owner.user})
    return moved
