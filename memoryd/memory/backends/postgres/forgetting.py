"""Forgetting in PostgreSQL: versions tombstoned or deleted with an audit row each, the
sessions and projects this owner forgot (what they bring later is never saved), and the
deletion records and forgotten scopes carried over from another store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.memory.backends.postgres.connection import Connections, fetch_all
from memoryd.memory.backends.postgres.owner import Owner
from memoryd.memory.backends.postgres.rows import utc
from memoryd.memory.backends.postgres.schema import BACKEND_NAME
from memoryd.memory.models import DeletionMode, DeletionRecord, ForgottenScope, Memory, MemoryType
from memoryd.memory.policy import began

if TYPE_CHECKING:
    import psycopg

log = structlog.get_logger("memoryd.memory.postgres")


def forget_filter(owner: Owner, *, session_id: int | None, session_external_id: str | None,
                  project: str | None, as_of: datetime | None,
                  memory_ids: Sequence[str] | None) -> tuple[str, dict[str, Any]]:
    """`forget_where`'s selection of this owner's memories: WHERE clause, parameters."""
    filters: list[str] = []
    params: dict[str, Any] = {"user": owner.user, "origin": owner.origin}
    if memory_ids is not None:
        filters.append("id = ANY(%(ids)s)")
        params["ids"] = list(memory_ids)
    if session_id is not None:
        filters.append("session_id = %(session_id)s AND origin = %(origin)s")
        params["session_id"] = session_id
    if session_external_id is not None:
        filters.append("session_external_id = %(external)s")
        params["external"] = session_external_id
    if project is not None:
        filters.append("project = %(project)s")
        params["project"] = project
    if as_of is not None:
        filters.append("created_at <= %(as_of)s")
        params["as_of"] = utc(as_of)
    return " AND ".join(["owner_user = %(user)s", *filters]), params


async def remember_forgotten(conn: psycopg.AsyncConnection[Any], owner: Owner,
                             scopes: set[tuple[str, str]], at: datetime) -> None:
    """Forgetting sticks (`policy`): what these sessions or projects bring later is kept out."""
    if scopes:
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO forgotten_scopes (owner_user, kind, value, forgotten_at)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (owner_user, kind, value)"
                " DO UPDATE SET forgotten_at ="
                " GREATEST(forgotten_scopes.forgotten_at, excluded.forgotten_at)",
                [(owner.user, k, v, at) for k, v in sorted(scopes)])


async def forgotten(conn: psycopg.AsyncConnection[Any], owner: Owner, memory: Memory) -> bool:
    prov = memory.provenance
    rows = await fetch_all(
        conn,
        "SELECT 1 FROM forgotten_scopes WHERE owner_user = %(user)s AND ("
        "(kind = 'session' AND value = %(external)s)"
        " OR (kind = 'session_id' AND value = %(session)s)"
        " OR (kind = 'project' AND value = %(project)s AND forgotten_at >= %(began)s))"
        " LIMIT 1",
        {"user": owner.user, "external": prov.session_external_id,
         "session": (None if prov.session_id is None
                     else f"{owner.origin}:{prov.session_id}"),
         "project": memory.project, "began": began(memory)})
    if rows:
        log.info("memory_not_saved_forgotten", backend=BACKEND_NAME, memory_id=memory.id,
                 session_external_id=prov.session_external_id, project=memory.project)
    return bool(rows)


async def delete_versions(conn: psycopg.AsyncConnection[Any], owner: Owner,
                          rows: Sequence[Mapping[str, Any]], *, hard: bool,
                          now: datetime) -> int:
    targets = list(rows) if hard else [r for r in rows if r["deleted_at"] is None]
    if not targets:
        return 0
    mode = DeletionMode.HARD if hard else DeletionMode.SOFT
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO memory_deletions (owner_user, origin, memory_id, mode, type,"
            " project, session_id, session_external_id, deleted_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(owner.user, r["origin"], r["id"], mode.value, r["type"], r["project"],
              r["session_id"], r["session_external_id"], now) for r in targets])
    ids = [r["id"] for r in targets]
    if hard:
        await conn.execute("DELETE FROM memories WHERE owner_user = %s AND id = ANY(%s)",
                           (owner.user, ids))
    else:
        await conn.execute(
            "UPDATE memories SET deleted_at = %s, updated_at = %s"
            " WHERE owner_user = %s AND id = ANY(%s)", (now, now, owner.user, ids))
    return len(targets)


async def deletion_records(db: Connections, owner: Owner,
                           memory_id: str | None) -> list[DeletionRecord]:
    sql = "SELECT * FROM memory_deletions WHERE owner_user = %(user)s"
    params: dict[str, Any] = {"user": owner.user}
    if memory_id is not None:
        sql += " AND memory_id = %(id)s"
        params["id"] = memory_id
    rows = await db.read(sql + " ORDER BY seq", params)
    return [DeletionRecord(
        memory_id=r["memory_id"], mode=DeletionMode(r["mode"]), type=MemoryType(r["type"]),
        project=r["project"], session_id=r["session_id"],
        session_external_id=r["session_external_id"], deleted_at=r["deleted_at"])
        for r in rows]


async def import_deletions(conn: psycopg.AsyncConnection[Any], owner: Owner,
                           records: Iterable[DeletionRecord]) -> int:
    """Copy deletion records from another store; a hard one keeps its id out for good."""
    added = 0
    for r in records:
        rows = await fetch_all(
            conn,
            "INSERT INTO memory_deletions (owner_user, origin, memory_id, mode, type,"
            " project, session_id, session_external_id, deleted_at)"
            " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s WHERE NOT EXISTS (SELECT 1 FROM"
            " memory_deletions WHERE owner_user = %s AND memory_id = %s AND mode = %s"
            " AND deleted_at = %s) RETURNING seq",
            (owner.user, owner.origin, r.memory_id, r.mode.value,
             r.type.value, r.project, r.session_id, r.session_external_id,
             r.deleted_at, owner.user, r.memory_id, r.mode.value, r.deleted_at))
        added += len(rows)
    return added


async def forgotten_scopes(db: Connections, owner: Owner) -> list[ForgottenScope]:
    """This user's forgotten sessions and projects. memoryd's own session numbers are
    this machine's (stored as `origin:number`): other machines' are not given."""
    rows = await db.read(
        "SELECT kind, value, forgotten_at FROM forgotten_scopes WHERE owner_user = %s"
        " ORDER BY kind, value", (owner.user,))
    mine = f"{owner.origin}:"
    scopes = []
    for r in rows:
        value = r["value"]
        if r["kind"] == "session_id":
            if not value.startswith(mine):
                continue
            value = value[len(mine):]
        scopes.append(ForgottenScope(r["kind"], value, r["forgotten_at"]))
    return scopes


async def import_forgotten_scopes(conn: psycopg.AsyncConnection[Any], owner: Owner,
                                  scopes: Iterable[ForgottenScope]) -> int:
    """Keep scopes forgotten in another store of this machine forgotten here too."""
    added = 0
    for scope in scopes:
        value = (f"{owner.origin}:{scope.value}" if scope.kind == "session_id"
                 else scope.value)
        rows = await fetch_all(
            conn,
            "INSERT INTO forgotten_scopes (owner_user, kind, value, forgotten_at)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (owner_user, kind, value)"
            " DO UPDATE SET forgotten_at = excluded.forgotten_at"
            " WHERE excluded.forgotten_at > forgotten_scopes.forgotten_at RETURNING 1",
            (owner.user, scope.kind, value, scope.at))
        added += len(rows)
    return added
