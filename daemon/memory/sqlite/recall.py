"""Recall in SQLite: filters in SQL, then the `ranking` formula over a candidate pool.

With query words, the candidates are the filtered FTS5 matches, ordered by
(tier, bm25) in SQL; the best POOL of them are scored in Python and the best
`limit` returned. The result is exact whenever fewer than POOL memories match,
or whenever the `limit`-th score beats the relevance of the pool's last
candidate (a score never exceeds its relevance). Otherwise, which happens only
when a query's words occur in a large part of the store and BM25 barely tells
memories apart, importance and recency rerank the POOL best keyword matches
rather than every match: reading more costs little in SQLite (the FTS scan
dominates) but scoring every row in Python does. Without query words the
weight is the whole score and SQLite orders by it through the registered
`memoryd_score` function.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from daemon.memory import ranking
from daemon.memory.models import MemoryType
from daemon.memory.protocol import RecallOrder
from daemon.memory.records import to_utc_text
from daemon.memory.sqlite import fts

log = structlog.get_logger("memoryd.memory.sqlite")

SCORE_FUNCTION = "memoryd_score"
IN_PROJECT = "(m.project = :project OR m.project IS NULL)"
POOL = 1000

Fetch = Callable[[str, dict[str, Any]], Awaitable[list[sqlite3.Row]]]

# Age for decay: since the conversation ended (else since creation). Never since a recall:
# a memory returned once must not look fresh in every later query (see `ranking`).
AGE_DAYS = "(julianday(:now) - julianday(COALESCE(m.ended_at, m.created_at)))"
#: A memory someone opened by its id (`record_use`): a higher decay floor.
USED = "(m.access_count > 0)"
_TIME = "COALESCE(m.started_at, m.created_at), m.created_at, m.id"
_RECENT = "COALESCE(m.started_at, m.created_at) DESC, m.created_at DESC, m.id"


def score_sql(bm25: float | None, importance: float, memory_type: str, age_days: float,
              used: int) -> float:
    """`ranking.score`, registered in SQLite as memoryd_score(bm25, importance, type, age, used)."""
    return ranking.score(bm25, importance, memory_type, age_days, bool(used))


def row_score(row: sqlite3.Row) -> float:
    return ranking.score(row["bm"], row["importance"], row["type"], row["age"],
                         row["access_count"] > 0)


@dataclass(frozen=True, slots=True)
class RecallPlan:
    """The FROM/WHERE of one recall, with its parameters."""

    source: str
    where: str
    params: dict[str, Any]
    bm25: str
    tier: str

    @property
    def has_match(self) -> bool:
        return "match" in self.params

    def select(self, order_by: str, limit: int) -> tuple[str, dict[str, Any]]:
        sql = (
            f"SELECT m.*, {self.bm25} AS bm, {AGE_DAYS} AS age, {self.tier} AS tier"
            f" FROM {self.source} WHERE {self.where} ORDER BY {order_by} LIMIT :limit"
        )
        return sql, {**self.params, "limit": limit}


def plan(
    query: str,
    *,
    now: datetime,
    project: str | None,
    since: datetime | None,
    until: datetime | None,
    types: Iterable[MemoryType] | None,
    all_projects: bool,
    agent: str | None = None,
) -> RecallPlan | None:
    """The SQL for a recall, or None when the filters can match nothing.

    Memories private to an agent are in it only when `agent` is that agent."""
    params: dict[str, Any] = {"now": to_utc_text(now)}
    where = ["m.deleted_at IS NULL", "m.superseded_by IS NULL"]
    if agent is None:
        where.append("m.private_to IS NULL")
    else:
        where.append("(m.private_to IS NULL OR m.private_to = :agent)")
        params["agent"] = agent
    match = fts.match_expression(query)
    if match is not None:
        source = "memories_fts JOIN memories m ON m.seq = memories_fts.rowid"
        where.append("memories_fts MATCH :match")
        params["match"] = match
        bm25 = "bm25(memories_fts, 1.0, 0.5)"
    else:
        source, bm25 = "memories m", "NULL"
    tier = "0"
    if project is not None:
        params["project"] = project
        in_project = IN_PROJECT
        if all_projects:
            tier = f"(CASE WHEN {in_project} THEN 0 ELSE 1 END)"
        else:
            where.append(in_project)
    if since is not None:
        where.append("COALESCE(m.ended_at, m.started_at, m.created_at) >= :since")
        params["since"] = to_utc_text(since)
    if until is not None:
        where.append("COALESCE(m.started_at, m.created_at) < :until")
        params["until"] = to_utc_text(until)
    if types is not None:
        wanted = sorted({MemoryType(t).value for t in types})
        if not wanted:
            return None
        names = [f"type{i}" for i in range(len(wanted))]
        where.append(f"m.type IN ({', '.join(':' + n for n in names)})")
        params.update(zip(names, wanted, strict=True))
    return RecallPlan(source, " AND ".join(where), params, bm25, tier)


async def ranked_rows(
    fetch: Fetch, recall: RecallPlan, *, limit: int, order: RecallOrder
) -> list[tuple[sqlite3.Row, float]]:
    """The best `limit` rows with their scores, best first (or oldest first for "time")."""
    if order in ("time", "recent"):
        rows = await fetch(*recall.select(_TIME if order == "time" else _RECENT, limit))
        return [(row, row_score(row)) for row in rows]
    if not recall.has_match:
        weight = f"{SCORE_FUNCTION}(NULL, m.importance, m.type, {AGE_DAYS}, {USED})"
        rows = await fetch(*recall.select(f"tier, {weight} DESC, m.id", limit))
        return [(row, row_score(row)) for row in rows]
    pool = max(POOL, limit)
    rows = await fetch(*recall.select("tier, bm, m.id", pool))
    scored = sorted(((row, row_score(row)) for row in rows),
                    key=lambda pair: (pair[0]["tier"], -pair[1], pair[0]["id"]))
    best = scored[:limit]
    if len(rows) == pool and best:
        last, (edge, edge_score) = rows[-1], best[-1]
        exact = edge["tier"] < last["tier"] or edge_score > ranking.relevance(last["bm"])
        log.debug("memory_recall_pool_full", pool=pool, exact=exact)
    return best
