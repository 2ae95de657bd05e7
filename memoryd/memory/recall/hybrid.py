"""Hybrid recall's ranking, written once for every backend.

A backend supplies only its dialect (`Channels`): the chunks its keyword search and its
vector search find for the query under the recall's filters, and the rows it holds. The
rest is here:

1. Gather: the keyword channel's best chunks (relevance in [0, 1)), then the vector
   channel's (cosine), each with its memory's tier (0 first: the project's own).
   `fusion="vector"` asks the keywords only when there are no vectors to rank by.
2. A keyword channel that weighs nothing (SQLite's FTS5 in a store of one or two
   memories: every word is in half or more of the chunks, its IDF clamped) is stood in
   for by the share of the query's words a chunk holds (`gate.coverage`), when there are
   no vectors to lead instead.
3. Fuse each chunk's two relevances (`fusion.fuse`; `adaptive` asks whether the best
   keyword chunks hold the query's words); a memory's relevance is its best chunk's.
4. Weigh: `ranking.blend` of relevance, importance, type and age, tier first; then one
   memory a session, its best (`per_session.first_of_each`), whose excerpt is the session's
   best evidence: its best chunks among its memories of that memory's type (one
   segment's tail, the next one's head).
5. Near-duplicates out: a result whose best chunk has a cosine of DUPLICATE_COSINE or
   more with a better result's (both with vectors), or without vectors DUPLICATE_OVERLAP
   of the same words in their excerpts. Whole rows are read a batch at a time, best
   first, only until `limit` results are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memoryd.memory.recall import gate, per_session, ranking
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

#: Chunks each channel gives at least (`limit * 10` when more).
CANDIDATES = 200
#: A result's excerpt: its best chunks, up to this many, within 80 % of the best.
EXCERPT_CHUNKS = 2
#: Keyword relevance below this is FTS5's clamp, not a ranking (step 2).
UNWEIGHED = 1e-3
#: Keyword relevance of a chunk holding every query word when the keyword channel weighs
#: none: about where BM25 puts such a chunk in a larger store.
STAND_IN_RELEVANCE = 0.9
DUPLICATE_COSINE = 0.97
DUPLICATE_OVERLAP = 0.9

#: A backend's row (sqlite3.Row, a dict from psycopg), read by column name.
Row = Any
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Match:
    """A chunk a channel found: the backend's keys for it and its memory, the channel's
    relevance, and the memory's tier (0 ranks first)."""

    chunk: int
    memory: int
    score: float
    tier: int = 0


@dataclass(frozen=True, slots=True)
class Weight:
    """What weighing reads of a memory before its whole row: its id (the tie-break),
    importance, type, age in days, whether someone opened it, and its session's key
    (`per_session.key_of`)."""

    id: str
    importance: float
    type: str
    age: float
    used: bool
    session: per_session.SessionKey | None


@dataclass(slots=True)
class Found:
    """One result: the memory's row, its score, the excerpt's chunk rows in the
    conversation's order, its best chunk's fused relevance, the best cosine among its
    evidence (None without vectors), and how many of its session's memories matched."""

    row: Row
    score: float
    chunks: list[Row]
    relevance: float
    similarity: float | None
    session_matches: int

    @property
    def excerpt(self) -> str:
        return "\n…\n".join(chunk["content"] for chunk in self.chunks)

    def provenance_range(self, uuids_of: Callable[[Row], Iterable[str]]
                         ) -> tuple[int | None, int | None, tuple[str, ...]]:
        """The messages the excerpt quotes: first and last index, and their uuids."""
        firsts = [c["first_index"] for c in self.chunks if c["first_index"] is not None]
        lasts = [c["last_index"] for c in self.chunks if c["last_index"] is not None]
        uuids: dict[str, None] = {}
        for chunk in self.chunks:
            uuids.update(dict.fromkeys(uuids_of(chunk)))
        return (min(firsts) if firsts else None, max(lasts) if lasts else None, tuple(uuids))


class Channels(Protocol):
    """A backend's dialect of hybrid recall, for one query under one recall's filters."""

    async def keyword(self, pool: int) -> list[Match]:
        """The best `pool` chunks by keyword relevance, best first."""

    async def vector(self, pool: int) -> list[Match] | None:
        """The best `pool` chunks by cosine to the query, best first; None when there
        are no vectors to rank by (no model, the query's embedding failed, none stored)."""

    async def embedded(self, chunks: Sequence[int]) -> set[int]:
        """Those of `chunks` that have a vector of the model the query was embedded by."""

    async def texts(self, chunks: Sequence[int]) -> dict[int, str]:
        """The chunks' texts."""

    async def weights(self, memories: Sequence[int]) -> dict[int, Weight]:
        """What weighing reads of each memory (a memory forgotten meanwhile is absent)."""

    async def rows(self, memories: Sequence[int]) -> dict[int, Row]:
        """The memories' whole rows (a memory forgotten meanwhile is absent)."""

    async def chunk_rows(self, chunks: Sequence[int]) -> dict[int, Row]:
        """The chunks' rows: content, first_index, last_index, memory_seq, ordinal, ..."""

    async def close_pairs(self, chunks: Sequence[int]) -> set[tuple[int, int]]:
        """The pairs (lower key first) of `chunks`, all with vectors, whose cosine is at
        least DUPLICATE_COSINE."""


async def rank(channels: Channels, query: str, *, limit: int, fusion: Fusion = "adaptive",
               vector_weight: float = VECTOR_WEIGHT,
               paraphrase_vector_weight: float = PARAPHRASE_VECTOR_WEIGHT) -> list[Found]:
    """The best `limit` memories for `query`, best first (see the module's steps)."""
    pool = max(CANDIDATES, limit * 10)
    candidates: dict[int, Candidate] = {}
    tiers: dict[int, int] = {}

    def gathered(matches: list[Match]) -> None:
        for place, match in enumerate(matches, 1):
            candidates[match.chunk] = Candidate(match.chunk, match.memory, keyword=match.score,
                                                keyword_rank=place)
            tiers[match.memory] = match.tier

    if fusion != "vector":
        gathered(await channels.keyword(pool))
    nearest = await channels.vector(pool)
    vectors_on = nearest is not None
    if nearest is not None:
        for place, match in enumerate(nearest, 1):
            chunk = candidates.setdefault(match.chunk, Candidate(match.chunk, match.memory))
            chunk.vector, chunk.vector_rank = max(match.score, 0.0), place
            tiers[match.memory] = match.tier
        embedded = await channels.embedded(list(candidates))
        for chunk in candidates.values():
            chunk.has_vector = chunk.chunk in embedded
    elif fusion == "vector":
        gathered(await channels.keyword(pool))  # no vectors to rank by: keywords, not nothing
    if not candidates:
        return []
    if not vectors_on and max(c.keyword for c in candidates.values()) < UNWEIGHED:
        for seq, text in (await channels.texts(list(candidates))).items():
            # The clamped value stays as the tie-break: it still orders chunks holding
            # the same words by how often and in how few words they hold them.
            candidates[seq].keyword += STAND_IN_RELEVANCE * gate.coverage(query, text)
    covered = True
    if fusion == "adaptive" and vectors_on:
        top = best_keyword(candidates.values())
        covered = bool(top) and max(c.keyword for c in top) >= UNWEIGHED and words_found(
            query, (await channels.texts([c.chunk for c in top])).values())
    best = fuse(candidates.values(), fusion, vectors_on=vectors_on, vector_weight=vector_weight,
                paraphrase_vector_weight=paraphrase_vector_weight, found=covered)
    # A session counts once: enough memories to hold `limit` sessions are weighed.
    keep = worth_weighting(best, per_session.pool(limit))
    weights = await channels.weights(list(keep))
    by_score = sorted(
        (tiers.get(memory, 0),
         -ranking.blend(keep[memory][0].fused, w.importance, w.type, w.age, w.used),
         w.id, memory)
        for memory, w in weights.items())
    keys = [weights[memory].session for *_, memory in by_score]
    firsts = per_session.first_of_each(keys, len(by_score))
    ranked = [by_score[position] for position, _ in firsts]
    matches = {by_score[position][3]: count for position, count in firsts}
    evidence: dict[int, list[Candidate]] = {}
    leader: dict[object, int] = {}
    for (*_, memory), key in zip(by_score, keys, strict=True):
        lead = leader.setdefault((key, weights[memory].type) if key else memory, memory)
        evidence.setdefault(lead, []).extend(keep[memory])
    for chunks in evidence.values():
        chunks.sort(key=lambda c: -c.fused)
    return await _kept(channels, ranked, evidence, best, matches, limit=limit,
                       vectors_on=vectors_on)


async def _kept(channels: Channels, ranked: list[tuple[int, float, str, int]],
                evidence: dict[int, list[Candidate]], best: dict[int, list[Candidate]],
                matches: dict[int, int], *, limit: int, vectors_on: bool) -> list[Found]:
    """Whole rows read a batch at a time, best first, until `limit` results are left once
    near-duplicates are dropped."""
    found: list[tuple[Found, Candidate]] = []
    kept: list[tuple[Found, Candidate]] = []
    batch = max(limit * 2, 10)
    for start in range(0, len(ranked), batch):
        part = ranked[start:start + batch]
        rows = await channels.rows([memory for *_, memory in part])
        chunk_rows = await channels.chunk_rows(
            [c.chunk for *_, memory in part for c in evidence[memory][:EXCERPT_CHUNKS]])
        for _, negative_score, _, memory in part:
            if memory not in rows:
                continue  # forgotten since it was weighed
            chunks = evidence[memory]
            top = [chunk_rows[c.chunk] for c in chunks[:EXCERPT_CHUNKS]
                   if c.chunk in chunk_rows and c.fused >= 0.8 * chunks[0].fused]
            similarity = (max((c.vector for c in chunks if c.has_vector), default=None)
                          if vectors_on else None)
            found.append((Found(rows[memory], -negative_score, _in_order(top),
                                chunks[0].fused, similarity, matches[memory]),
                          best[memory][0]))
        kept = await _without_duplicates(channels, found, limit)
        if len(kept) >= limit:
            break
    return [result for result, _ in kept]


def _in_order(chunks: list[Row]) -> list[Row]:
    """The chunks in the conversation's order (they may come from two segments)."""
    return sorted(chunks, key=lambda c: (c["first_index"] is None, c["first_index"] or 0,
                                         c["memory_seq"], c["ordinal"]))


async def _without_duplicates(channels: Channels, found: list[tuple[Found, Candidate]],
                              limit: int) -> list[tuple[Found, Candidate]]:
    with_vectors = [head.chunk for _, head in found if head.has_vector]
    close = await channels.close_pairs(with_vectors) if len(with_vectors) > 1 else set()
    words: dict[int, frozenset[str]] = {}  # a result's excerpt words, made when needed

    def words_of(result: Found) -> frozenset[str]:
        key = id(result)
        if key not in words:
            words[key] = frozenset(_WORD.findall(result.excerpt.lower()))
        return words[key]

    def duplicate(a: Found, a_head: Candidate, b: Found, b_head: Candidate) -> bool:
        if a_head.has_vector and b_head.has_vector:
            pair = (min(a_head.chunk, b_head.chunk), max(a_head.chunk, b_head.chunk))
            return pair in close
        a_words, b_words = words_of(a), words_of(b)
        if not a_words or not b_words:
            return False
        return len(a_words & b_words) / len(a_words | b_words) >= DUPLICATE_OVERLAP

    kept: list[tuple[Found, Candidate]] = []
    for result, head in found:
        if len(kept) >= limit:
            break
        if not any(duplicate(result, head, other, other_head) for other, other_head in kept):
            kept.append((result, head))
    return kept

