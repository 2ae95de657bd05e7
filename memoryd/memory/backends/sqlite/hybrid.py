"""Hybrid recall's SQLite dialect: FTS5 BM25 and the in-memory vector index, as the
channels that `memoryd/memory/recall/hybrid.py` ranks (the ranking itself is there, shared
with every backend).

- Filters first. The same WHERE as keyword recall (live, project, time span, types)
  selects the memories allowed; both channels only ever see chunks of those memories.
- Keyword channel: the best chunks by BM25 in `memory_chunks_fts`, relevance `s / (s + 1)`
  with s = -bm25 (`ranking.relevance`). Confined to one project, the MATCH itself carries
  the project's scope token (schema v3), so FTS5 ranks only that project's (and
  project-less) chunks rather than every chunk in the store holding a query word.
- Vector channel: the best chunks by cosine to the query's embedding (`vector_index`). The
  embedding is computed on a worker thread while SQLite runs the keyword channel and this
  channel's filter query, and awaited only then.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from memoryd.memory.backends.sqlite import fts
from memoryd.memory.backends.sqlite.recall import AGE_DAYS, IN_PROJECT, USED, RecallPlan
from memoryd.memory.recall import per_session, ranking
from memoryd.memory.recall.hybrid import DUPLICATE_COSINE, Match, Row, Weight

if TYPE_CHECKING:  # NumPy is imported only when there are vectors
    from memoryd.memory.backends.sqlite.vector_index import Floats, VectorIndex

#: How many of FTS5's best matches are read to find the best `pool` that the filters allow.
KEYWORD_OVERFETCH = 2

Fetch = Callable[[str, dict[str, Any]], Awaitable[list[sqlite3.Row]]]
# `{scope} : ("p<id>" OR "p0") AND <:match>`, with <id> the project's from memory_projects.
_SCOPED_MATCH = (
    """('{scope} : ("p' || COALESCE((SELECT id FROM memory_projects"""
    """ WHERE project = :project), 0) || '" OR "p0") AND ' || :match)"""
)


class SQLiteChannels:
    """The channels of one hybrid recall over one read connection (`recall.hybrid.Channels`).

    `query_vector` is awaited only after the keyword channel has run, so an embedding
    being computed meanwhile costs no extra wall time; `index_of` gives the vector index
    once it is loaded."""

    def __init__(self, fetch: Fetch, filters: RecallPlan, query: str,
                 query_vector: Awaitable[Floats | None] | None,
                 index_of: Callable[[], VectorIndex | None]) -> None:
        self._fetch = fetch
        self._filters = filters
        self._match = fts.match_expression(query, content_only=True)
        self._query_vector = query_vector
        self._index_of = index_of
        self._index: VectorIndex | None = None

    async def keyword(self, pool: int) -> list[Match]:
        if self._match is None:
            return []
        # Confined to a project, the MATCH also requires the project's scope token or p0,
        # so FTS5 ranks that project's chunks only, not every chunk holding a query word.
        # The token is looked up inside the statement: one round trip fewer.
        match_sql = _SCOPED_MATCH if IN_PROJECT in self._filters.where else ":match"
        rows = await _keyword_rows(self._fetch, self._filters, match_sql,
                                   {**self._filters.params, "match": self._match, "pool": pool})
        return [Match(row["seq"], row["memory_seq"], ranking.relevance(row["bm"]), row["tier"])
                for row in rows]

    async def vector(self, pool: int) -> list[Match] | None:
        if self._query_vector is None:
            return None
        # SQL for this channel's filter, still while the embedding is being computed.
        allowed = await self._fetch(_allowed_sql(self._filters), self._filters.params)
        vector = await self._query_vector
        index = self._index = self._index_of()
        if vector is None or index is None or len(index) == 0:
            return None
        if not allowed:
            return []
        import numpy as np

        per_tier = [np.fromstring(r["seqs"], dtype=np.int64, sep=",") for r in allowed]
        seqs = np.concatenate(per_tier)
        tier_of = np.zeros(int(seqs.max()) + 1, dtype=np.int64)
        for row, members in zip(allowed, per_tier, strict=True):
            tier_of[members] = row["tier"]
        return [Match(chunk, memory, cosine, int(tier_of[memory]))
                for chunk, memory, cosine in index.search(vector, pool, seqs)]

    async def embedded(self, chunks: Sequence[int]) -> set[int]:
        index = self._index
        return set() if index is None else {chunk for chunk in chunks if index.has(chunk)}

    async def texts(self, chunks: Sequence[int]) -> dict[int, str]:
        rows = await self._fetch(
            f"SELECT seq, content FROM memory_chunks WHERE seq IN ({_seq_list(chunks)})", {})
        return {row["seq"]: row["content"] for row in rows}

    async def weights(self, memories: Sequence[int]) -> dict[int, Weight]:
        # Scored on a few columns first; whole rows are read only for as many memories,
        # best first, as the results need.
        rows = await self._fetch(
            f"SELECT m.seq AS seq, m.id AS id, m.importance AS importance, m.type AS type,"
            f" m.source AS source, m.session_external_id AS external_id,"
            f" m.session_id AS session_id, m.project AS project,"
            f" {AGE_DAYS} AS age, {USED} AS used"
            f" FROM memories m WHERE m.seq IN ({_seq_list(memories)})",
            {"now": self._filters.params["now"]})
        return {w["seq"]: Weight(w["id"], w["importance"], w["type"], w["age"], bool(w["used"]),
                                 per_session.key_of(w["type"], w["source"], w["external_id"],
                                                 w["session_id"], w["project"]))
                for w in rows}

    async def rows(self, memories: Sequence[int]) -> dict[int, Row]:
        return {r["seq"]: r for r in await self._fetch(
            f"SELECT m.* FROM memories m WHERE m.seq IN ({_seq_list(memories)})", {})}

    async def chunk_rows(self, chunks: Sequence[int]) -> dict[int, Row]:
        return {r["seq"]: r for r in await self._fetch(
            f"SELECT * FROM memory_chunks WHERE seq IN ({_seq_list(chunks)})", {})}

    async def close_pairs(self, chunks: Sequence[int]) -> set[tuple[int, int]]:
        index = self._index
        if index is None:
            return set()
        return index.close_pairs(chunks, DUPLICATE_COSINE)


def _allowed_sql(filters: RecallPlan) -> str:
    """The seqs of the memories the filters allow, one comma-separated list per tier.

    One row per tier rather than one per memory: a project can hold thousands
    of memories, and building a Python row for each cost more than the search.
    SQLite scans the whole project index for `project = ? OR project IS NULL`;
    as a UNION ALL of the two halves each is an index search (11 ms -> 1 ms
    at 100,000 memories).
    """
    select = f"SELECT m.seq AS seq, {filters.tier} AS tier FROM memories m WHERE "
    if IN_PROJECT not in filters.where:
        allowed = select + filters.where
    else:
        allowed = " UNION ALL ".join(
            select + filters.where.replace(IN_PROJECT, half)
            for half in ("m.project = :project", "m.project IS NULL"))
    return f"SELECT tier, group_concat(seq) AS seqs FROM ({allowed}) GROUP BY tier"


async def _keyword_rows(fetch: Fetch, filters: RecallPlan, match_sql: str,
                        params: dict[str, Any]) -> list[sqlite3.Row]:
    """The best `:pool` chunks by BM25 that the filters allow, best first.

    When every allowed memory is of one tier (recall in one project), FTS5 first
    ranks its matches alone, and only its best KEYWORD_OVERFETCH x pool are joined
    to their memories and checked against the filters: reading a memory's row for
    each of thousands of matches cost as much as ranking them (at 100,000
    memories, 27 -> 19 ms). Only when there were more matches than that and the
    filters left fewer than `:pool` of them does the statement run over them all.
    """
    if filters.tier == "0":
        ranked = params["pool"] * KEYWORD_OVERFETCH
        rows = await fetch(
            "SELECT c.seq AS seq, c.memory_seq AS memory_seq, f.bm AS bm, 0 AS tier,"
            f" (m.seq IS NOT NULL AND ({filters.where})) AS allowed"
            " FROM (SELECT rowid, bm25(memory_chunks_fts, 1.0, 0.0) AS bm"
            f" FROM memory_chunks_fts WHERE memory_chunks_fts MATCH {match_sql}"
            " ORDER BY bm LIMIT :ranked) f"
            " LEFT JOIN memory_chunks c ON c.seq = f.rowid"
            " LEFT JOIN memories m ON m.seq = c.memory_seq ORDER BY f.bm",
            {**params, "ranked": ranked})
        allowed = [row for row in rows if row["allowed"]]
        if len(rows) < ranked or len(allowed) >= params["pool"]:
            return allowed[:params["pool"]]
    return await fetch(
        f"SELECT c.seq AS seq, c.memory_seq AS memory_seq,"
        f" bm25(memory_chunks_fts, 1.0, 0.0) AS bm, {filters.tier} AS tier"
        " FROM memory_chunks_fts JOIN memory_chunks c ON c.seq = memory_chunks_fts.rowid"
        " JOIN memories m ON m.seq = c.memory_seq"
        f" WHERE memory_chunks_fts MATCH {match_sql} AND {filters.where}"
        " ORDER BY tier, bm LIMIT :pool", params)


def _seq_list(seqs: Iterable[int]) -> str:
    return ", ".join(str(int(s)) for s in seqs)
