"""The Memory values every backend stores: one place for defaults, checks and masks.

A backend decides where and how a memory is kept; what the memory is (its
importance by type, its project, its masked text, what a correction inherits)
is decided here, so the embedded, PostgreSQL and JSONL backends and the chain
store the same thing for the same call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from memoryd.errors import BackendError
from memoryd.memory.models import (
    DEFAULT_IMPORTANCE,
    DIGEST_KIND,
    DISTILLED_TAG,
    REQUESTED_IMPORTANCE,
    REQUESTED_TAG,
    ConversationSegment,
    DistilledMemory,
    Memory,
    MemoryType,
    Provenance,
    RequestedMemory,
    SessionSummary,
    new_memory_id,
)
from memoryd.memory.privacy.redaction import redact
from memoryd.names import agent_name


def fraction(name: str, value: float) -> float:
    """`value` as a float in 0..1, or ValueError naming `name`."""
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} {value} is outside 0..1")
    return float(value)


def _importance(kind: MemoryType, importance: float | None) -> float:
    return DEFAULT_IMPORTANCE[kind] if importance is None else fraction("importance", importance)


def new_memory(content: str, *, type: MemoryType, importance: float | None,
               project: str | None, tags: Iterable[str], provenance: Provenance | None,
               now: datetime, private_to: str | None = None) -> Memory:
    """What `remember` stores: a fresh id, the text masked (what a person or an agent types
    may hold a secret too), the project defaulting to the provenance's."""
    if not content.strip():
        raise ValueError("a memory needs some content")
    kind = MemoryType(type)
    prov = provenance or Provenance()
    return Memory(id=new_memory_id(), content=redact(content), type=kind,
                  importance=_importance(kind, importance),
                  project=project if project is not None else prov.project, tags=tuple(tags),
                  provenance=prov, created_at=now, updated_at=now,
                  private_to=agent_name(private_to))


def correction(old: Memory | None, memory_id: str, new_content: str, *, reason: str | None,
               provenance: Provenance | None, now: datetime, backend: str) -> Memory:
    """The memory that supersedes `old` (None: not found). It is of type `correction`, as
    important as the old one or the correction default, whichever is higher (a person
    said it: it never decays), and inherits the old one's project and tags."""
    if not new_content.strip():
        raise ValueError("a correction needs some content")
    if old is None:
        raise BackendError(f"no memory {memory_id}", backend=backend)
    if old.deleted_at is not None:
        raise BackendError(f"memory {memory_id} was forgotten", backend=backend)
    if old.superseded_by is not None:
        raise BackendError(f"memory {memory_id} was already corrected by {old.superseded_by};"
                           " correct the latest version", backend=backend)
    return Memory(
        id=new_memory_id(), content=redact(new_content), type=MemoryType.CORRECTION,
        importance=max(old.importance, DEFAULT_IMPORTANCE[MemoryType.CORRECTION]),
        project=old.project, tags=old.tags, provenance=provenance or old.provenance,
        created_at=now, updated_at=now, supersedes=old.id,
        reason=redact(reason) if reason else None,
        private_to=old.private_to)


def _auto(memory_id: str, content: str, kind: MemoryType, importance: float | None,
          project: str | None, tags: tuple[str, ...], provenance: Provenance,
          now: datetime, private_to: str | None) -> Memory:
    return Memory(id=memory_id, content=content, type=kind,
                  importance=_importance(kind, importance), project=project, tags=tags,
                  provenance=provenance, created_at=now, updated_at=now,
                  private_to=agent_name(private_to))


def segment_memory(segment: ConversationSegment, now: datetime) -> Memory:
    return _auto(segment.id, segment.text, MemoryType.CONVERSATION, segment.importance,
                 segment.project, segment.tags, segment.provenance, now,
                 segment.private_to)


def summary_memory(summary: SessionSummary, now: datetime) -> Memory:
    kind = MemoryType.SESSION_DIGEST if summary.kind == DIGEST_KIND else MemoryType.SESSION_SUMMARY
    return _auto(summary.id, summary.content, kind, summary.importance,
                 summary.project, (summary.kind,), summary.provenance, now,
                 summary.private_to)


def requested_memory(requested: RequestedMemory, now: datetime) -> Memory:
    # A notch below a fact someone stored on purpose (0.9): it was read out of prose.
    return _auto(requested.id, requested.content, MemoryType.FACT, REQUESTED_IMPORTANCE,
                 requested.project, (REQUESTED_TAG,), requested.provenance, now,
                 requested.private_to)


def distilled_memory(distilled: DistilledMemory, now: datetime) -> Memory:
    """An observation; `supersedes` names the one it replaces, which the backend
    supersedes only if it is a live observation (a model never overrides a person)."""
    memory = _auto(distilled.id, distilled.content, MemoryType.OBSERVATION, None,
                   distilled.project, (DISTILLED_TAG, distilled.kind), distilled.provenance,
                   now, distilled.private_to)
    return replace(memory, supersedes=distilled.replaces) if distilled.replaces else memory


#: Message uuids an observation's provenance keeps at most as its evidence grows.
MAX_EVIDENCE = 200


def grow_evidence(have: Sequence[str], more: Iterable[str]) -> list[str]:
    """`have` and then those of `more` not in it, up to MAX_EVIDENCE in all."""
    grown = list(have)
    seen = set(grown)
    for uuid in more:
        if len(grown) >= MAX_EVIDENCE:
            break
        if uuid and uuid not in seen:
            grown.append(uuid)
            seen.add(uuid)
    return grown


def imported(memory: Memory) -> Memory:
    """A memory read from an export file, masked as memory is now: an export from
    elsewhere (or an older memoryd) may hold what masks now catch, in its text, its tags
    or a correction's reason."""
    return replace(memory, content=redact(memory.content),
                   tags=tuple(redact(t) for t in memory.tags),
                   reason=redact(memory.reason) if memory.reason else None)
