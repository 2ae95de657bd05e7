"""Recall in SQLite without ranking by words: filters in SQL, the weight in SQL.

Ranked recall with words is hybrid, over chunks (`hybrid.py`), which takes its
filters from `plan("")`. What is left here: recall without words (the weight,
importance times decay, is the whole score, and SQLite orders by it through the
registered `memoryd_score` function), and recall in time order (`time`,
`recent`), where words only select the memories that hold them through the
chunk index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memoryd.memory import policy
from memoryd.memory.backends.sqlite import fts
from memoryd.memory.export_format import to_utc_text
from memoryd.memory.models import MemoryType
from memoryd.memory.protocol import RecallOrder
from memoryd.memory.recall import ranking

SCORE_FUNCTION = "memoryd_score"
IN_PROJECT = "(m.project = :project OR m.project IS NULL)"

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

    where: str
    params: dict[str, Any]
    tier: str

    def select(self, order_by: str, limit: int) -> tuple[str, dict[str, Any]]:
        sql = (
            # No keyword relevance here (`bm` NULL): words only select (see the docstring).
            f"SELECT m.*, NULL AS bm, {AGE_DAYS} AS age, {self.tier} AS tier"
            f" FROM memories m WHERE {self.where} ORDER BY {order_by} LIMIT :limit"
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
    """The SQL for a recall (`policy.recall_filters`), or None when the filters can match
    nothing; words, when given, select the memories whose chunks hold them."""
    filters = policy.recall_filters(
        lambda name: f":{name}", moment=to_utc_text, project=project, since=since,
        until=until, types=types, all_projects=all_projects, agent=agent)
    if filters is None:
        return None
    where, params = list(filters.where), {"now": to_utc_text(now), **filters.params}
    match = fts.match_expression(query, content_only=True)
    if match is not None:
        # Ranked recall with words is hybrid (chunks); here words only select.
        where.append("m.seq IN (SELECT c.memory_seq FROM memory_chunks_fts JOIN memory_chunks c"
                     " ON c.seq = memory_chunks_fts.rowid WHERE memory_chunks_fts MATCH :match)")
        params["match"] = match
    return RecallPlan(" AND ".join(where), params, filters.tier)


async def ranked_rows(
    fetch: Fetch, recall: RecallPlan, *, limit: int, order: RecallOrder
) -> list[tuple[sqlite3.Row, float]]:
    """The best `limit` rows with their scores, best first (or oldest first for "time")."""
    if order in ("time", "recent"):
        rows = await fetch(*recall.select(_TIME if order == "time" else _RECENT, limit))
        return [(row, row_score(row)) for row in rows]
    weight = f"{SCORE_FUNCTION}(NULL, m.importance, m.type, {AGE_DAYS}, {USED})"
    rows = await fetch(*recall.select(f"tier, {weight} DESC, m.id", limit))
    return [(row, row_score(row)) for row in rows]
