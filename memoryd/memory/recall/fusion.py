"""Fusing the keyword and vector channels of hybrid recall (every backend fuses the same way).

A backend finds candidate chunks in two channels: keyword relevance in [0, 1)
(`ranking.relevance` of BM25 in SQLite, of `ts_rank` in PostgreSQL) and vector
similarity max(cos, 0). `fuse` turns each chunk's pair into one relevance and
groups the chunks by memory, best first. The fusions:

- `adaptive` (the default): `weighted` with a weight that depends on whether the
  query's words were found. When one of the best COVERAGE_CHUNKS keyword chunks
  covers at least WORDS_FOUND of the query's content words (`gate.coverage`),
  w is the vector weight (0.1): keywords lead, which is what questions that name
  people and things need. When none does (the memory says it in other words: a
  paraphrase, a feeling, an event told differently), the keyword channel only
  matched incidental words, and w is the paraphrase weight (0.8): vectors lead.
  Keyword relevance is near-saturated for any match (~0.9), so a fixed small w
  lets incidental keyword matches beat every paraphrase; a fixed large w costs
  named-entity questions (LoCoMo nDCG@5 0.743 -> 0.646 at 0.5). See
  docs/performance.md for the measurements. A keyword channel that weighs nothing
  (SQLite's FTS5 in a store of one or two memories: every word is in half or more of
  the chunks) counts as not found.
- `weighted`: w * vector + (1 - w) * keyword, a channel that did not return the
  chunk counting 0. A chunk with no vector yet (the background queue has not
  reached it) takes its keyword relevance alone, so fresh memories are not
  penalised.
- `rrf`: reciprocal rank fusion, sum of 1 / (60 + rank) over the channels,
  divided by its maximum 2/61.
- `relative`: each channel's score divided by that channel's best for this query,
  then weighted (relative score fusion).
- `vector`: the vector channel alone, for the benchmarks' comparison.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from memoryd.memory.recall import gate

Fusion = Literal["adaptive", "weighted", "relative", "rrf", "vector"]
# Measured on LoCoMo, all-MiniLM-L6-v2, 1,000-char chunks (docs/performance.md): nDCG@5
# 0.571 at the starting point 0.7 (600-char chunks), 0.703 at 0.3, 0.743 at 0.1.
VECTOR_WEIGHT = 0.1
# The vector weight for a query whose words the keyword channel did not find (`adaptive`).
PARAPHRASE_VECTOR_WEIGHT = 0.8
# `adaptive`: the query's words count as found when one of the best COVERAGE_CHUNKS
# keyword chunks covers at least WORDS_FOUND of them (gate.coverage).
WORDS_FOUND = 0.4
COVERAGE_CHUNKS = 3
RRF_K = 60


@dataclass(slots=True)
class Candidate:
    """One chunk found by either channel; `chunk` and `memory` are the backend's keys."""

    chunk: int
    memory: int
    keyword: float = 0.0
    keyword_rank: int | None = None
    vector: float = 0.0
    vector_rank: int | None = None
    has_vector: bool = False
    fused: float = 0.0


def fuse_one(candidate: Candidate, fusion: Fusion, vectors_on: bool,
             scale: tuple[float, float] = (1.0, 1.0),
             vector_weight: float = VECTOR_WEIGHT) -> float:
    """One chunk's fused relevance; `scale` is (best vector, best keyword) for `relative`."""
    if fusion == "relative" and vectors_on and candidate.has_vector:
        return (vector_weight * candidate.vector / scale[0]
                + (1.0 - vector_weight) * candidate.keyword / scale[1])
    if fusion == "vector":
        return candidate.vector if vectors_on else candidate.keyword
    if fusion == "rrf":
        total = sum(1.0 / (RRF_K + r) for r in (candidate.keyword_rank, candidate.vector_rank)
                    if r is not None)
        return total / (2.0 / (RRF_K + 1))
    if not vectors_on or not candidate.has_vector:
        return candidate.keyword
    return vector_weight * candidate.vector + (1.0 - vector_weight) * candidate.keyword


def best_keyword(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The COVERAGE_CHUNKS best keyword candidates, whose text `words_found` judges."""
    return sorted((c for c in candidates if c.keyword_rank is not None),
                  key=lambda c: c.keyword_rank or 0)[:COVERAGE_CHUNKS]


def words_found(query: str, best_keyword_texts: Iterable[str]) -> bool:
    """Whether the best keyword chunks mention what `query` asks about (see `adaptive`)."""
    return any(gate.coverage(query, text) >= WORDS_FOUND for text in best_keyword_texts)


def fuse(candidates: Iterable[Candidate], fusion: Fusion, *, vectors_on: bool,
         vector_weight: float = VECTOR_WEIGHT,
         paraphrase_vector_weight: float = PARAPHRASE_VECTOR_WEIGHT,
         found: bool = True) -> dict[int, list[Candidate]]:
    """Set each candidate's `fused` relevance; the candidates by memory, best chunk first.

    `found` is `words_found` for the query (only `adaptive` uses it).
    """
    chunks = list(candidates)
    if fusion == "adaptive":
        fusion = "weighted"
        if vectors_on and not found:
            vector_weight = paraphrase_vector_weight
    scale = (max([c.vector for c in chunks] + [1e-9]),
             max([c.keyword for c in chunks] + [1e-9]))
    best: dict[int, list[Candidate]] = {}
    for chunk in chunks:
        chunk.fused = fuse_one(chunk, fusion, vectors_on, scale, vector_weight)
        best.setdefault(chunk.memory, []).append(chunk)
    for group in best.values():
        group.sort(key=lambda c: -c.fused)
    return best


def worth_weighting(best: dict[int, list[Candidate]], limit: int) -> dict[int, list[Candidate]]:
    """The memories that can still reach the top `limit` once weighted.

    Weighting can move a memory at most by a factor of 2 (`ranking.blend`), so only
    memories whose relevance is at least half the (4 * limit)-th best can make it.
    """
    if not best:
        return {}
    relevances = sorted((c[0].fused for c in best.values()), reverse=True)
    floor = relevances[min(len(relevances), limit * 4) - 1] * 0.5
    return {m: c for m, c in best.items() if c[0].fused >= floor}
