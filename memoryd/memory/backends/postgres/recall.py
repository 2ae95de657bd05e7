"""Recall in PostgreSQL without ranking by words: the owner's filters, and the weight
(importance times decay) in SQL for recall without words or in time order."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from memoryd.memory import policy
from memoryd.memory.backends.postgres.hybrid import AGE_DAYS, Filters, Read
from memoryd.memory.backends.postgres.owner import Owner, mine
from memoryd.memory.backends.postgres.rows import recall_result, utc
from memoryd.memory.models import DECAYING_TYPES, MemoryType, RecallResult
from memoryd.memory.protocol import RecallOrder
from memoryd.memory.recall import ranking

_DECAYING = tuple(t.value for t in DECAYING_TYPES)
# ranking.score's weight in SQL, for recall without words: importance * decay, see `ranking`.
_WEIGHT = (
    "(0.5 + 0.5 * m.importance * CASE WHEN m.type = ANY(%(decaying)s) THEN GREATEST("
    f"CASE WHEN m.access_count > 0 THEN {ranking.USED_DECAY_FLOOR} ELSE {ranking.DECAY_FLOOR}"
    f" END, power(0.5, GREATEST({AGE_DAYS}, 0) / {ranking.HALF_LIFE_DAYS})) ELSE 1 END)"
)


def filters_for(owner: Owner, *, now: datetime, project: str | None, since: datetime | None,
            until: datetime | None, types: Iterable[MemoryType] | None,
            all_projects: bool, agent: str | None = None) -> Filters | None:
    rules = policy.recall_filters(
        lambda name: f"%({name})s", moment=utc, project=project, since=since,
        until=until, types=types, all_projects=all_projects, agent=agent)
    if rules is None:
        return None
    owned, params = mine(owner)
    where = [owned, *rules.where]
    params.update(rules.params, now=now, decaying=list(_DECAYING))
    tier = rules.tier
    chunk_where = ["c.owner_user = %(user)s"]
    if rules.in_project is not None:
        chunk_where.append("(c.project = %(project)s OR c.project IS NULL)")
    return Filters(" AND ".join(where), params, tier, " AND ".join(chunk_where),
                    scoped=rules.in_project is not None)


async def listed(read: Read, filters: Filters, limit: int, order: RecallOrder
             ) -> list[RecallResult]:
    """Without words: by weight (tier first), oldest first, or newest first."""
    order_by = {
        "score": f"tier, {_WEIGHT} DESC, m.id",
        "time": "COALESCE(m.started_at, m.created_at), m.created_at, m.id",
        "recent": "COALESCE(m.started_at, m.created_at) DESC, m.created_at DESC, m.id",
    }[order]
    rows = await read(
        f"SELECT m.*, {filters.tier} AS tier, {_WEIGHT} AS weight FROM memories m"
        f" WHERE {filters.where} ORDER BY {order_by} LIMIT %(limit)s",
        {**filters.params, "limit": limit})
    return [recall_result(row, float(row["weight"])) for row in rows]
