"""Hybrid recall's PostgreSQL dialect: full text and pgvector, as the channels that
`memoryd/memory/recall/hybrid.py` ranks (the ranking itself is there, shared with every
backend).

- Keyword channel: chunks matching `websearch_to_tsquery` of the query's words, by
  `ts_rank` squashed into [0, 1) (`s / (s + 1)` of TS_RANK_SCALE x rank: an ordinary
  match lands where BM25's does in the embedded backend).
- Vector channel: pgvector's cosine distance over chunks embedded by this model (HNSW;
  a project of few chunks is compared exactly instead, `few_chunks`).

Each statement carries the recall's filters (owner, live, project, time span, types).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memoryd.memory.backends.postgres.schema import vector_literal
from memoryd.memory.recall import per_session
from memoryd.memory.recall.hybrid import DUPLICATE_COSINE, Match, Row, Weight

if TYPE_CHECKING:
    from memoryd.memory.embeddings.interface import Embedder

# ts_rank of one matching word in a short text is about 0.06; scaled so that an ordinary
# match lands where BM25's does in the embedded backend (relevance ~0.4-0.9).
TS_RANK_SCALE = 10.0
#: A memory's age in days at the recall's `now`.
AGE_DAYS = ("(EXTRACT(EPOCH FROM (%(now)s::timestamptz"
            " - COALESCE(m.ended_at, m.created_at))) / 86400.0)")

Read = Callable[[str, Mapping[str, Any]], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class Filters:
    """A recall's filters as SQL: on memories (`where`, with `m`), on chunks
    (`chunk_where`, with `c`), the tier expression, and whether one project is asked."""

    where: str
    params: dict[str, Any]
    tier: str
    chunk_where: str
    scoped: bool


class PostgresChannels:
    """The channels of one hybrid recall (`recall.hybrid.Channels`). `query_vector` is the
    query's embedding being computed meanwhile (None without a model); `few_chunks` says
    whether a project is small enough to compare exactly."""

    def __init__(self, read: Read, filters: Filters, words: list[str],
                 query_vector: asyncio.Task[list[float] | None] | None,
                 embedder: Embedder | None,
                 few_chunks: Callable[[Filters, Mapping[str, Any]], Awaitable[bool]]) -> None:
        self._read = read
        self._filters = filters
        self._params = {**filters.params, "words": " or ".join(words)}
        self._query_vector = query_vector
        self._embedder = embedder
        self._few_chunks = few_chunks
        self._texts: dict[int, str] = {}

    async def keyword(self, pool: int) -> list[Match]:
        filters = self._filters
        rows = await self._read(
            "SELECT c.seq, c.memory_seq, c.content, ts_rank(c.tsv, q) AS rank,"
            f" {filters.tier} AS tier FROM memory_chunks c"
            " JOIN memories m ON m.seq = c.memory_seq,"
            " websearch_to_tsquery('english', %(words)s) q"
            f" WHERE c.tsv @@ q AND {filters.chunk_where} AND {filters.where}"
            " ORDER BY tier, rank DESC, c.seq LIMIT %(pool)s", {**self._params, "pool": pool})
        found = []
        for row in rows:
            scaled = TS_RANK_SCALE * float(row["rank"])
            found.append(Match(row["seq"], row["memory_seq"], scaled / (scaled + 1.0),
                               row["tier"]))
            self._texts[row["seq"]] = row["content"]
        return found

    async def vector(self, pool: int) -> list[Match] | None:
        embedder = self._embedder
        vector = await self._query_vector if self._query_vector is not None else None
        if vector is None or embedder is None:
            return None
        filters = self._filters
        dims = int(embedder.dimensions)
        distance = f"c.embedding::vector({dims}) <=> %(vector)s::vector({dims})"
        mine = (f"vector_dims(c.embedding) = {dims} AND c.model = %(model)s"
                f" AND {filters.chunk_where}")
        params = {**self._params, "pool": pool, "vector": vector_literal(vector),
                  "model": embedder.name}
        if filters.scoped and await self._few_chunks(filters, params):
            # Every chunk of the project, compared exactly: an HNSW scan would have to
            # walk past most of the other projects' chunks to find enough of these.
            sql = (f"WITH c AS MATERIALIZED (SELECT c.seq, c.memory_seq, c.embedding"
                   f" FROM memory_chunks c WHERE {mine})"
                   f" SELECT c.seq, c.memory_seq, 1 - ({distance}) AS cosine,"
                   f" {filters.tier} AS tier FROM c JOIN memories m ON m.seq = c.memory_seq"
                   f" WHERE {filters.where} ORDER BY {distance} LIMIT %(pool)s")
        else:
            sql = (f"SELECT c.seq, c.memory_seq, 1 - ({distance}) AS cosine,"
                   f" {filters.tier} AS tier"
                   " FROM memory_chunks c JOIN memories m ON m.seq = c.memory_seq"
                   f" WHERE {mine} AND {filters.where}"
                   f" ORDER BY {distance} LIMIT %(pool)s")
        rows = await self._read(sql, params)
        rows.sort(key=lambda row: -float(row["cosine"]))
        return [Match(row["seq"], row["memory_seq"], float(row["cosine"]), row["tier"])
                for row in rows]

    async def embedded(self, chunks: Sequence[int]) -> set[int]:
        if self._embedder is None or not chunks:
            return set()
        rows = await self._read(
            "SELECT seq FROM memory_chunks WHERE seq = ANY(%(seqs)s) AND model = %(model)s",
            {"seqs": list(chunks), "model": self._embedder.name})
        return {row["seq"] for row in rows}

    async def texts(self, chunks: Sequence[int]) -> dict[int, str]:
        missing = [chunk for chunk in chunks if chunk not in self._texts]
        if missing:
            for row in await self._read(
                    "SELECT seq, content FROM memory_chunks WHERE seq = ANY(%(seqs)s)",
                    {"seqs": missing}):
                self._texts[row["seq"]] = row["content"]
        return {chunk: self._texts[chunk] for chunk in chunks if chunk in self._texts}

    async def weights(self, memories: Sequence[int]) -> dict[int, Weight]:
        rows = await self._read(
            "SELECT m.seq, m.id, m.importance, m.type, m.source, m.session_external_id,"
            f" m.session_id, m.project, {AGE_DAYS} AS age, m.access_count > 0 AS used"
            " FROM memories m WHERE m.seq = ANY(%(seqs)s)",
            {"now": self._filters.params["now"], "seqs": list(memories)})
        return {r["seq"]: Weight(r["id"], float(r["importance"]), r["type"], float(r["age"]),
                                 bool(r["used"]),
                                 per_session.key_of(r["type"], r["source"],
                                                    r["session_external_id"], r["session_id"],
                                                    r["project"]))
                for r in rows}

    async def rows(self, memories: Sequence[int]) -> dict[int, Row]:
        return {r["seq"]: r for r in await self._read(
            "SELECT m.* FROM memories m WHERE m.seq = ANY(%(seqs)s)", {"seqs": list(memories)})}

    async def chunk_rows(self, chunks: Sequence[int]) -> dict[int, Row]:
        return {r["seq"]: r for r in await self._read(
            "SELECT seq, memory_seq, ordinal, content, first_index, last_index, message_uuids"
            " FROM memory_chunks WHERE seq = ANY(%(seqs)s)", {"seqs": list(chunks)})}

    async def close_pairs(self, chunks: Sequence[int]) -> set[tuple[int, int]]:
        if len(chunks) < 2 or self._embedder is None:
            return set()
        rows = await self._read(
            "SELECT a.seq AS a, b.seq AS b FROM memory_chunks a JOIN memory_chunks b"
            " ON a.seq < b.seq AND vector_dims(a.embedding) = vector_dims(b.embedding)"
            " WHERE a.seq = ANY(%(seqs)s) AND b.seq = ANY(%(seqs)s)"
            " AND a.model = %(model)s AND b.model = %(model)s"
            " AND 1 - (a.embedding <=> b.embedding) >= %(cosine)s",
            {"seqs": list(chunks), "model": self._embedder.name, "cosine": DUPLICATE_COSINE})
        return {(r["a"], r["b"]) for r in rows}
