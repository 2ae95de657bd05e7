"""Recall by session: a session's best evidence once, not five chunks of one session.

People ask about sessions ("how did we add tracing", "what did I say about my sister"),
and a session is saved as several memories: its conversation segments and its digest.
Ranked by memory, one long session's segments and digest fill the result list; the
questions' answers are in other sessions below them (LongMemEval-dev: the first 10
memories covered about 6.5 distinct sessions). So ranked recall weighs more memories
than it returns (`pool`: POOL times the limit) and keeps the best memory of each session,
in rank order; the others of its session are counted in `session_matches`. SQLite and
PostgreSQL do it on a few columns before they read whole rows (`first_of_each`), JSONL
and the gateway on their list, and the API once more after a chain's layers merge
(`one_per_session`).

Only what was saved automatically from a session groups this way (conversation
segments, digests, summaries): facts, corrections and project context are each their own
answer, whatever session they were said in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memoryd.memory.models import MemoryType, RecallResult

#: Ranked recall weighs POOL times the results it returns (at least MIN_POOL), so that
#: enough distinct sessions are among them.
POOL = 3
MIN_POOL = 20

_GROUPED_NAMES = frozenset(t.value for t in (
    MemoryType.CONVERSATION, MemoryType.SESSION_DIGEST, MemoryType.SESSION_SUMMARY))

SessionKey = tuple[str | None, str | int | None, str | None]


def pool(limit: int) -> int:
    """How many memories to weigh, to return `limit` sessions."""
    return max(limit * POOL, MIN_POOL)


def key_of(memory_type: MemoryType | str, source: str | None, external_id: str | None,
           session_id: int | None, project: str | None) -> SessionKey | None:
    """The session a memory of `memory_type` with this provenance was saved from, or None
    when the memory stands on its own (its own type, or no session)."""
    if str(memory_type) not in _GROUPED_NAMES:
        return None
    session = external_id if external_id is not None else session_id
    if session is None:
        return None
    return (source, session, project)


def session_key(result: RecallResult) -> SessionKey | None:
    """The session `result` was saved from, or None when it stands on its own."""
    p = result.provenance
    return key_of(result.type, p.source, p.session_external_id, p.session_id, result.project)


def first_of_each(keys: Sequence[SessionKey | None], limit: int) -> list[tuple[int, int]]:
    """(position, how many of its session) of the first of each session among `keys`, and
    of every None, in order, at most `limit`: what `one_per_session` keeps."""
    kept: list[tuple[int, int]] = []
    place: dict[SessionKey, int] = {}
    for position, key in enumerate(keys):
        if key is None:
            if len(kept) < limit:
                kept.append((position, 1))
        elif key in place:
            at = place[key]
            if at >= 0:
                kept[at] = (kept[at][0], kept[at][1] + 1)
        elif len(kept) < limit:
            place[key] = len(kept)
            kept.append((position, 1))
        else:
            place[key] = -1  # a session past the limit: its later memories are not kept
    return kept


def one_per_session(results: Sequence[RecallResult], limit: int) -> list[RecallResult]:
    """The first (best) result of each session and every ungrouped one, in order, at
    most `limit`; each kept result counts its session's results in `session_matches`."""
    kept = []
    for position, count in first_of_each([session_key(r) for r in results], limit):
        result = results[position]
        count = max(count, result.session_matches)
        kept.append(replace(result, session_matches=count) if count > 1 else result)
    return kept
