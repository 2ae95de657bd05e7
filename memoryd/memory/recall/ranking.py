"""How recall scores a memory: keyword relevance, weighted by importance and recency.

    s          = -bm25(memory_chunks_fts)     # FTS5 BM25 of the best chunk, >= 0
    relevance  = s / (s + 1)                  # squashed into [0, 1); 1 when there is no query
    decay      = 1                            # fact, correction, project_context never decay
               | max(floor, 0.5 ** (age_days / HALF_LIFE_DAYS))   # conversation, summary
    floor      = USED_DECAY_FLOOR (0.5) once the memory was really used, else DECAY_FLOOR (0.25)
    age_days   = now - (ended_at or created_at)   # when the conversation happened
    weight     = importance * decay           # in [0, 1]
    score      = share * relevance * (0.5 + 0.5 * weight)
    share      = DIGEST_SHARE (0.5) for a session digest, else 1

Relevance dominates (an irrelevant memory never outranks a relevant one by a
wide margin), importance breaks near-ties, and auto-saved memories fade with
the age of the conversation they hold. The floor keeps old conversation
findable by a strong keyword match.

Recall never feeds on itself: being returned by recall or injected into an
agent's context changes nothing about a memory's rank (when every returned
memory became "fresh" again, returned memories outranked better matches in
every later query, and LoCoMo recall@10 through the CLI fell from 0.91 to
0.56). Use counts only when it is real: a person or an agent opened the
memory by its id (`show-memory`, the MCP `get_memory` tool, the API's
memory endpoint), recorded by `record_use`. Its effect is bounded: a used
memory's decay floor is 0.5 instead of 0.25, so at most it moves the weight
of an old auto-saved memory from 0.25 to 0.5 of its importance (a score
change of at most 12.5 %), and never touches its age or relevance.

When recall is scoped to a project with `all_projects=True`, memories of that
project (and project-less ones) come first, each tier ordered by score; the
score itself is not changed.

These are pure functions so every backend ranks the same way.
"""

from __future__ import annotations

import math

from memoryd.memory.models import DECAYING_TYPES, MemoryType

HALF_LIFE_DAYS = 30.0
DECAY_FLOOR = 0.25
USED_DECAY_FLOOR = 0.5

_DECAYING = frozenset(t.value for t in DECAYING_TYPES)
#: A session digest restates what its session's segments hold, in fewer words (so BM25
#: favours it): it ranks above them only when it matches decidedly better, and the
#: segment, which holds the evidence, comes first on a near tie.
DIGEST_SHARE = 0.5
_DIGEST = MemoryType.SESSION_DIGEST.value


def relevance(bm25: float | None) -> float:
    """FTS5's bm25 (negative, more negative is better) squashed into [0, 1)."""
    if bm25 is None:
        return 1.0
    s = max(-bm25, 0.0)
    return s / (s + 1.0)


def decay(memory_type: MemoryType | str, age_days: float, used: bool = False) -> float:
    """How much of its importance a memory keeps `age_days` after its conversation."""
    if str(memory_type) not in _DECAYING:
        return 1.0
    floor = USED_DECAY_FLOOR if used else DECAY_FLOOR
    return max(floor, math.pow(0.5, max(age_days, 0.0) / HALF_LIFE_DAYS))


def score(bm25: float | None, importance: float, memory_type: MemoryType | str,
          age_days: float, used: bool = False) -> float:
    """The recall score of one memory (see the module docstring)."""
    return blend(relevance(bm25), importance, memory_type, age_days, used)


def blend(relevance_value: float, importance: float, memory_type: MemoryType | str,
          age_days: float, used: bool = False) -> float:
    """`score` for a relevance already in [0, 1] (hybrid recall's fused relevance)."""
    weight = importance * decay(memory_type, age_days, used)
    share = DIGEST_SHARE if str(memory_type) == _DIGEST else 1.0
    return share * relevance_value * (0.5 + 0.5 * weight)
