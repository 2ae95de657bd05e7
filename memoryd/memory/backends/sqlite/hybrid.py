"""Hybrid recall: FTS5 BM25 and vector similarity over chunks, fused, then weighted.

Order of work for one query (with words; an empty query or `order="time"`
goes through `recall.py` unchanged):

1. Filters first. The same WHERE as keyword recall (live, project, time span,
   types) selects the memories allowed; both channels only ever see chunks of
   those memories.
2. Keyword channel: the best CANDIDATES chunks by BM25 in `memory_chunks_fts`,
   relevance `s / (s + 1)` with s = -bm25 (as in `ranking`). Confined to one
   project, the MATCH itself carries the project's scope token (schema v3), so
   FTS5 ranks only that project's (and project-less) chunks rather than every
   chunk in the store holding a query word.
3. Vector channel: the best CANDIDATES chunks by cosine similarity to the
   query's embedding (`vector_index`), relevance max(cos, 0). The embedding is
   computed on a worker thread while SQLite runs step 2 and the filter query
   of this step, and awaited only then.
4. Fusion, per chunk (`memoryd/memory/recall/fusion.py`, shared by every backend):
   `adaptive` by default, the vector weight (0.1) when the best keyword chunks
   cover the query's words, the paraphrase weight (0.8) when they do not.
5. Merge: a memory's relevance is its best chunk's; its result carries the
   best chunks' text as `excerpt` and their messages as provenance.
6. Importance and recency: `ranking.blend(relevance, importance, type, age)`
   = relevance * (0.5 + 0.5 * importance * decay), tier first with
   `all_projects`; then one memory per session, its best
   (`memoryd/memory/recall/sessions.py`), before whole rows are read.
7. Near-duplicates dropped: a result whose best chunk has cosine >= 0.97 with a
   better result's best chunk (or, without vectors, >= 0.9 word overlap).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memoryd.memory.backends.sqlite import fts
from memoryd.memory.backends.sqlite.recall import AGE_DAYS, IN_PROJECT, USED, RecallPlan
from memoryd.memory.recall import gate, ranking, sessions
from memoryd.memory.recall.fusion import (
    PARAPHRASE_VECTOR_WEIGHT,
    VECTOR_WEIGHT,
    Candidate,
    Fusion,
    best_keyword,
    fuse,
    words_found,
    worth_weighting,
)

if TYPE_CHECKING:  # NumPy is imported only when there are vectors
    from memoryd.memory.backends.sqlite.vector_index import Floats, VectorIndex

CANDIDATES = 200
#: How many of FTS5's best matches are read to find the best `pool` that the filters allow.
KEYWORD_OVERFETCH = 2
EXCERPT_CHUNKS = 2
#: Keyword relevance below this is FTS5's clamp, not a ranking: vectors lead (`_words_found`).
UNWEIGHED = 1e-3
#: Keyword relevance of a chunk holding every query word when BM25 weighs none
#: (`_stand_in_for_unweighed`): about where BM25 puts such a chunk in a larger store.
STAND_IN_RELEVANCE = 0.9
DUPLICATE_COSINE = 0.97
DUPLICATE_OVERLAP = 0.9

Fetch = Callable[[str, dict[str, Any]], Awaitable[list[sqlite3.Row]]]
# `{scope} : ("p<id>" OR "p0") AND <:match>`, with <id> the project's from memory_projects.
_SCOPED_MATCH = (
    """('{scope} : ("p' || COALESCE((SELECT id FROM memory_projects"""
    """ WHERE project = :project), 0) || '" OR "p0") AND ' || :match)"""
)
_WORD = re.compile(r"\w+")


@dataclass(slots=True)
class Hit:
    """One memory found by hybrid recall: its row, score, and the chunks that matched."""

    row: sqlite3.Row
    score: float
    chunks: list[sqlite3.Row] = field(default_factory=list)
    relevance: float = 1.0  # the best chunk's fused relevance
    similarity: float | None = None  # the best cosine among its chunks (None: no vectors)
    session_matches: int = 1  # memories of its session it stands for (`recall/sessions.py`)

    @property
    def excerpt(self) -> str:
        return "\n…\n".join(c["content"] for c in self._in_order())

    def _in_order(self) -> list[sqlite3.Row]:
        """The chunks in the conversation's order (they may come from two segments)."""
        return sorted(self.chunks, key=lambda c: (c["first_index"] is None, c["first_index"] or 0,
                                                  c["memory_seq"], c["ordinal"]))

    def provenance_range(self) -> tuple[int | None, int | None, tuple[str, ...]]:
        firsts = [c["first_index"] for c in self.chunks if c["first_index"] is not None]
        lasts = [c["last_index"] for c in self.chunks if c["last_index"] is not None]
        uuids: dict[str, None] = {}
        for c in self._in_order():
            uuids.update(dict.fromkeys(json.loads(c["message_uuids"])))
        return (min(firsts) if firsts else None, max(lasts) if lasts else None,
                tuple(uuids))


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


async def hybrid_rows(
    fetch: Fetch,
    filters: RecallPlan,
    query: str,
    query_vector: Awaitable[Floats | None] | None,
    index_of: Callable[[], VectorIndex | None],
    *,
    limit: int,
    fusion: Fusion = "adaptive",
    vector_weight: float = VECTOR_WEIGHT,
    paraphrase_vector_weight: float = PARAPHRASE_VECTOR_WEIGHT,
) -> list[Hit]:
    """The best `limit` memories for `query` under `filters` (a plan made without words).

    `query_vector` is awaited only after the keyword channel has run, so an
    embedding being computed meanwhile costs no extra wall time; `index_of`
    gives the vector index once it is loaded.
    """
    candidates: dict[int, Candidate] = {}
    tiers: dict[int, int] = {}
    match = fts.match_expression(query, content_only=True)
    # Confined to a project, the MATCH also requires the project's scope token or p0,
    # so FTS5 ranks that project's chunks only, not every chunk holding a query word.
    # The token is looked up inside the statement: one round trip fewer.
    match_sql = _SCOPED_MATCH if IN_PROJECT in filters.where else ":match"
    pool = max(CANDIDATES, limit * 10)

    async def keyword_channel() -> None:
        if match is None:
            return
        rows = await _keyword_rows(fetch, filters, match_sql,
                                   {**filters.params, "match": match, "pool": pool})
        for rank, row in enumerate(rows, 1):
            candidates[row["seq"]] = Candidate(row["seq"], row["memory_seq"],
                                            keyword=ranking.relevance(row["bm"]),
                                            keyword_rank=rank)
            tiers[row["memory_seq"]] = row["tier"]

    if fusion != "vector":
        await keyword_channel()
    # SQL for the vector channel's filter, still while the embedding is being computed.
    allowed = (await fetch(_allowed_sql(filters), filters.params)
               if query_vector is not None else [])
    vector = await query_vector if query_vector is not None else None
    index = index_of()
    vectors_on = vector is not None and index is not None and len(index) > 0
    if vectors_on and index is not None and vector is not None:
        if allowed:
            import numpy as np

            per_tier = [np.fromstring(r["seqs"], dtype=np.int64, sep=",") for r in allowed]
            seqs = np.concatenate(per_tier)
            tier_of = np.zeros(int(seqs.max()) + 1, dtype=np.int64)
            for row, members in zip(allowed, per_tier, strict=True):
                tier_of[members] = row["tier"]
            found = index.search(vector, pool, seqs)
            for rank, (chunk_seq, memory_seq, cosine) in enumerate(found, 1):
                chunk = candidates.setdefault(chunk_seq, Candidate(chunk_seq, memory_seq))
                chunk.vector, chunk.vector_rank = max(cosine, 0.0), rank
                tiers[memory_seq] = int(tier_of[memory_seq])
        for chunk in candidates.values():
            chunk.has_vector = index.has(chunk.chunk)
    elif fusion == "vector":
        await keyword_channel()  # no vectors to rank by: keywords rather than nothing
    if not candidates:
        return []
    if not vectors_on:
        await _stand_in_for_unweighed(fetch, query, candidates)
    covered = (await _words_found(fetch, query, candidates)
               if fusion == "adaptive" and vectors_on else True)
    best = fuse(candidates.values(), fusion, vectors_on=vectors_on,
                vector_weight=vector_weight,
                paraphrase_vector_weight=paraphrase_vector_weight, found=covered)
    # A session counts once (`recall/sessions.py`): enough memories to hold `limit`
    # sessions are weighed.
    keep = worth_weighting(best, sessions.pool(limit))
    # Scored on a few columns first; whole rows and chunk texts are read only for as
    # many memories, best first, as the results (after near-duplicates) need.
    weights = {w["seq"]: w for w in await fetch(
        f"SELECT m.seq AS seq, m.id AS id, m.importance AS importance, m.type AS type,"
        f" m.source AS source, m.session_external_id AS external_id,"
        f" m.session_id AS session_id, m.project AS project,"
        f" {AGE_DAYS} AS age, {USED} AS used"
        f" FROM memories m WHERE m.seq IN ({_seq_list(keep)})",
        {"now": filters.params["now"]},
    )}
    by_score = sorted(
        (tiers.get(w["seq"], 0),
         -ranking.blend(keep[w["seq"]][0].fused, w["importance"], w["type"], w["age"],
                        bool(w["used"])),
         w["id"], w["seq"])
        for w in weights.values())
    keys = [sessions.key_of(w["type"], w["source"], w["external_id"], w["session_id"],
                            w["project"]) for w in (weights[r[3]] for r in by_score)]
    firsts = sessions.first_of_each(keys, len(by_score))
    ranked = [by_score[position] for position, _ in firsts]
    matches = {by_score[position][3]: count for position, count in firsts}
    # The session's best evidence: its best chunks in memories of the first one's type
    # (one segment's tail, the next segment's head), not only the first memory's.
    evidence: dict[int, list[Candidate]] = {}
    leader: dict[object, int] = {}
    for (*_, seq), key in zip(by_score, keys, strict=True):
        lead = leader.setdefault((key, weights[seq]["type"]) if key else seq, seq)
        evidence.setdefault(lead, []).extend(keep[seq])
    for chunks in evidence.values():
        chunks.sort(key=lambda c: -c.fused)
    hits: list[Hit] = []
    kept: list[Hit] = []
    batch = max(limit * 2, 10)
    for start in range(0, len(ranked), batch):
        part = ranked[start:start + batch]
        rows = {r["seq"]: r for r in await fetch(
            f"SELECT m.* FROM memories m WHERE m.seq IN ({_seq_list(p[3] for p in part)})",
            {})}
        chunk_rows = {r["seq"]: r for r in await fetch(
            "SELECT * FROM memory_chunks WHERE seq IN"
            f" ({_seq_list(c.chunk for p in part for c in evidence[p[3]][:EXCERPT_CHUNKS])})",
            {})}
        for _, negative_score, _, seq in part:
            if seq not in rows:
                continue  # forgotten since the first read
            chunks = evidence[seq]
            top = [chunk_rows[c.chunk] for c in chunks[:EXCERPT_CHUNKS] if c.chunk in chunk_rows
                   and c.fused >= 0.8 * chunks[0].fused]
            hits.append(Hit(rows[seq], -negative_score, top, chunks[0].fused,
                            _similarity(chunks) if vectors_on else None, matches[seq]))
        kept = _dedup(hits, best, index, limit)
        if len(kept) >= limit:
            break
    return kept


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


async def _words_found(fetch: Fetch, query: str, candidates: dict[int, Candidate]) -> bool:
    top = best_keyword(candidates.values())
    # FTS5 gives a word in half or more of all chunks no weight (its IDF is clamped to
    # 1e-6): in a store of one or two memories every word is such a word, BM25 ranks
    # nothing, and a new user's first fact came back scored 0.08 for its own words.
    if not top or max(c.keyword for c in top) < UNWEIGHED:
        return False
    rows = await fetch(
        f"SELECT content FROM memory_chunks WHERE seq IN ({_seq_list(c.chunk for c in top)})", {})
    return words_found(query, (row["content"] for row in rows))


async def _stand_in_for_unweighed(fetch: Fetch, query: str,
                                  candidates: dict[int, Candidate]) -> None:
    """Keyword relevance by the share of the query's words a chunk holds, when BM25 weighs none.

    With keywords alone and a store of one or two memories (every word in half or more
    of the chunks, FTS5's IDF clamped), BM25 gave a new user's first fact 0.000 for its
    own words. The share (`gate.coverage`), scaled to where BM25 puts a chunk holding
    them, ranks and scores it as a larger store would. With vectors, they lead instead.
    """
    if max(c.keyword for c in candidates.values()) >= UNWEIGHED:
        return
    rows = await fetch(
        f"SELECT seq, content FROM memory_chunks WHERE seq IN ({_seq_list(candidates)})", {})
    for row in rows:
        chunk = candidates[row["seq"]]
        # BM25's own (clamped) value stays as the tie-break: it still orders chunks
        # holding the same words by how often and in how few words they hold them.
        chunk.keyword = STAND_IN_RELEVANCE * gate.coverage(query, row["content"]) + chunk.keyword


def _similarity(chunks: Iterable[Candidate]) -> float | None:
    embedded = [c.vector for c in chunks if c.has_vector]
    return max(embedded) if embedded else None


def _seq_list(seqs: Iterable[int]) -> str:
    return ", ".join(str(int(s)) for s in seqs)


def _dedup(hits: list[Hit], best: dict[int, list[Candidate]], index: VectorIndex | None,
           limit: int) -> list[Hit]:
    kept: list[tuple[Hit, int]] = []
    words: dict[int, frozenset[str]] = {}  # a hit's excerpt words, made only when needed

    def words_of(hit: Hit) -> frozenset[str]:
        key = id(hit)
        if key not in words:
            words[key] = frozenset(_WORD.findall(hit.excerpt.lower()))
        return words[key]

    for hit in hits:
        if len(kept) >= limit:
            break
        head = best[hit.row["seq"]][0].chunk
        if not any(_duplicate(head, hit, other_head, other, index, words_of)
                   for other, other_head in kept):
            kept.append((hit, head))
    return [hit for hit, _ in kept]


def _duplicate(a_chunk: int, a: Hit, b_chunk: int, b: Hit, index: VectorIndex | None,
               words_of: Callable[[Hit], frozenset[str]]) -> bool:
    if index is not None and index.has(a_chunk) and index.has(b_chunk):
        return index.cosine(a_chunk, b_chunk) >= DUPLICATE_COSINE
    a_words, b_words = words_of(a), words_of(b)
    if not a_words or not b_words:
        return False
    return len(a_words & b_words) / len(a_words | b_words) >= DUPLICATE_OVERLAP
