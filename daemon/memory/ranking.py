"""How recall scores a memory: keyword relevance, weighted by importance and recency.

    s          = -bm25(memories_fts)          # FTS5 BM25, >= 0, larger is better
    relevance  = s / (s + 1)                  # squashed into [0, 1); 1 when there is no query
    decay      = 1                            # fact, correction, project_context never decay
               | max(DECAY_FLOOR, 0.5 ** (age_days / HALF_LIFE_DAYS))   # conversation, summary
    age_days   = now - max(ended_at or created_at, last_accessed_at)
    weight     = importance * decay           # in [0, 1]
    score      = relevance * (0.5 + 0.5 * weight)

Relevance dominates (an irrelevant memory never outranks a relevant one by a
wide margin), importance breaks near-ties, and auto-saved memories fade with
age unless recall keeps touching them. The floor keeps old conversation
findable by a strong keyword match. When recall is scoped to a project with
`all_projects=True`, memories of that project (and project-less ones) come
first, each tier ordered by score; the score itself is not changed.

These are pure functions so every backend ranks the same way.
"""

from __future__ import annotations

import math

from daemon.memory.models import DECAYING_TYPES, MemoryType

HALF_LIFE_DAYS = 30.0
DECAY_FLOOR = 0.25

_DECAYING = frozenset(t.value for t in DECAYING_TYPES)


def relevance(bm25: float | None) -> float:
    """FTS5's bm25 (negative, more negative is better) squashed into [0, 1)."""
    if bm25 is None:
        return 1.0
    s = max(-bm25, 0.0)
    return s / (s + 1.0)


def decay(memory_type: MemoryType | str, age_days: float) -> float:
    """How much of its importance a memory keeps at `age_days` since it was last fresh."""
    if str(memory_type) not in _DECAYING:
        return 1.0
    return max(DECAY_FLOOR, math.pow(0.5, max(age_days, 0.0) / HALF_LIFE_DAYS))


def score(bm25: float | None, importance: float, memory_type: MemoryType | str,
          age_days: float) -> float:
    """The recall score of one memory (see the module docstring)."""
    weight = importance * decay(memory_type, age_days)
    return relevance(bm25) * (0.5 + 0.5 * weight)


def blend(relevance_value: float, importance: float, memory_type: MemoryType | str,
          age_days: float) -> float:
    """`score` for a relevance already in [0, 1] (hybrid recall's fused relevance)."""
    weight = importance * decay(memory_type, age_days)
    return relevance_value * (0.5 + 0.5 * weight)
