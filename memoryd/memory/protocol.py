"""The memory backend protocol: what every memory store (SQLite, Postgres, HTTP, JSONL) does.

Rules every backend follows (the contract tests in tests/memory check them):

- Ids are collision-safe hex UUIDs; `remember` makes a random one, segments,
  summaries and requested memories have deterministic ones and are stored at
  most once.
- Importance defaults by type (`models.DEFAULT_IMPORTANCE`); conversation and
  session summaries decay with the age of their conversation (`ranking`).
- `recall` never returns superseded or deleted memories, and it is a pure read:
  being returned changes nothing about a memory's later rank (`ranking`).
  `record_use` marks memories someone really used (opened by id); it may raise
  their weight a bounded amount and never fails the caller.
  A backend may search finer units than whole memories (the SQLite backend's
  hybrid recall searches chunks): it still returns one result per memory, sets
  `excerpt` to the part that matched, narrows `provenance` to that part's
  messages, and may drop a result that is a near-duplicate of a better one.
- `correct` stores a new `correction` memory that supersedes the old one; the old
  one stays for audit. Only the latest version of a chain can be corrected.
- `forget` acts on a memory's whole correction chain. Soft: a tombstone, the
  memory is never recalled again but `get` still shows it. Hard: the content is
  deleted and only a `DeletionRecord` remains; a hard-deleted id is never stored
  again (not by a re-saved segment, not by an import).
- Datetimes passed in must be timezone-aware; they come back in UTC.
- Failures raise `BackendError`; transient ones (locked, disk full, unreachable)
  raise `BackendUnavailable`. Bad arguments raise `ValueError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from memoryd.errors import BackendUnsupported
from memoryd.memory.models import (
    ConversationSegment,
    DeletionRecord,
    DistilledMemory,
    Memory,
    MemoryType,
    Provenance,
    RecallResult,
    RequestedMemory,
    SaveResult,
    SessionSummary,
)

if TYPE_CHECKING:
    from memoryd.memory.embeddings.interface import Embedder

RecallOrder = Literal["score", "time", "recent"]


class Capability(StrEnum):
    """What a backend can do. Callers ask (`require`) before they call: a backend
    that cannot forget says so instead of pretending."""

    REMEMBER = "remember"
    RECALL = "recall"
    FORGET = "forget"
    CORRECT = "correct"
    EXPORT = "export"  # export and import
    VECTORS = "vectors"  # semantic (hybrid) recall right now
    TEMPORAL = "temporal"  # since/until filters and time order


def require(backend: MemoryBackend, capability: Capability) -> None:
    """Raise BackendUnsupported unless `backend` declares `capability`."""
    if capability not in backend.capabilities:
        raise BackendUnsupported(f"cannot {capability.value}", backend=backend.name)


@runtime_checkable
class VectorQueue(Protocol):
    """A backend that computes vectors in the background (the embedded and Postgres ones)."""

    @property
    def embedder(self) -> Embedder | None:
        """The embedder hybrid recall uses, or None (keyword search only)."""
        ...

    async def pending_embeddings(self) -> int:
        """How many chunks of live memories still wait for a vector."""
        ...

    async def embed_pending(self, limit: int = 256) -> int:
        """Embed up to `limit` waiting chunks; how many were stored."""
        ...


def vector_queue(backend: object) -> VectorQueue | None:
    """`backend` as a VectorQueue when it is one and has an embedder, else None."""
    if isinstance(backend, VectorQueue) and backend.embedder is not None:
        return backend
    return None


@runtime_checkable
class MemoryRelease(Protocol):
    """A backend holding caches in the daemon's process (SQLite's pages) that it can hand
    back once a burst of work is over."""

    async def release_memory(self) -> None:
        """Drop what can be read again; never fails."""
        ...


async def release_memory(backend: object) -> None:
    """`backend.release_memory()` when it has such caches."""
    if isinstance(backend, MemoryRelease):
        await backend.release_memory()


@runtime_checkable
class SegmentBatch(Protocol):
    """A backend that saves several segments in one transaction (recovery's batches)."""

    async def save_conversation_segments(
            self, segments: Sequence[ConversationSegment]) -> list[SaveResult]:
        """`save_conversation_segment` for each, all or none durable; results in order."""
        ...


@runtime_checkable
class SegmentPreparation(Protocol):
    """A backend whose batches of segments need work no store does (their rows) before
    they are written, and can have it done ahead: recovery prepares a batch while the one
    before it is being written."""

    def prepare_conversation_segments(
            self, segments: Sequence[ConversationSegment]) -> Sequence[ConversationSegment]:
        """`segments`, with what saving them needs worked out: passed to
        `save_conversation_segments` later, they are saved as `segments` would be."""
        ...


def prepare_segments(backend: object, segments: Sequence[ConversationSegment]
                     ) -> Sequence[ConversationSegment]:
    """`segments` prepared for `save_segments(backend, ...)` when `backend` can do that
    ahead, else as they are."""
    if isinstance(backend, SegmentPreparation):
        return backend.prepare_conversation_segments(segments)
    return segments


async def save_segments(backend: MemoryBackend,
                        segments: Sequence[ConversationSegment]) -> list[SaveResult]:
    """Save `segments` in one batch when `backend` can, else one by one."""
    if isinstance(backend, SegmentBatch):
        return await backend.save_conversation_segments(segments)
    return [await backend.save_conversation_segment(s) for s in segments]


@runtime_checkable
class MemoryBrowse(Protocol):
    """A backend a viewer can browse: a session's memories, and memories per day."""

    async def session_memories(self, session_id: int) -> list[Memory]:
        """Every stored version made from this memoryd's session `session_id` (live,
        superseded or soft-deleted), in message order."""
        ...

    async def daily_counts(self, since: datetime) -> list[tuple[str, str | None, int]]:
        """(UTC day as YYYY-MM-DD, project, live memories) for the memories whose
        conversation (or creation, without one) began on or after `since`."""
        ...


@dataclass(frozen=True, slots=True)
class Relabelled:
    """What `relabel_project` did: how many memories moved, and the layers that could not
    move theirs (they keep them under the old path)."""

    moved: int
    unmoved: tuple[str, ...] = ()


@runtime_checkable
class IdPrefix(Protocol):
    """A backend that finds memories by the start of their id (as sessions are found)."""

    async def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        """Up to `limit` ids that start with `prefix` (lower-case hex), in order."""
        ...


@runtime_checkable
class ContentRewrite(Protocol):
    """A backend that can replace the text of a memory memoryd wrote itself (a conversation
    segment rendered again from the same messages, `lifecycle.rerender`)."""

    async def rewrite_content(self, memory_id: str, content: str) -> bool:
        """Replace live memory `memory_id`'s text in one transaction, its chunks (and so
        its vectors) made again; False when it is not there, not live, or already says
        `content`. Its id, provenance and history stay."""
        ...


@runtime_checkable
class EvidenceGrowth(Protocol):
    """A backend that can add messages to what a memory rests on (an observation a model
    read again elsewhere, `distill`)."""

    async def add_evidence(self, memory_id: str, message_uuids: Sequence[str]) -> bool:
        """Add `message_uuids` (those not there yet; `writes.grow_evidence`) to live
        memory `memory_id`'s provenance; False when it is not there, not live, or
        nothing was added."""
        ...


@runtime_checkable
class ProjectRelabel(Protocol):
    """A backend that can move a project's memories to a new path (a renamed folder)."""

    async def relabel_project(self, old: str, new: str) -> Relabelled:
        """Move every memory of project `old` to project `new`."""
        ...


@runtime_checkable
class MemoryBackend(Protocol):
    name: str

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What this backend can do (see Capability); fixed for the backend's lifetime,
        but VECTORS, which follows whether an embedder is configured."""
        ...

    async def is_available(self) -> bool:
        """True when the store answers right now (never raises)."""
        ...

    async def remember(
        self,
        content: str,
        *,
        type: MemoryType = MemoryType.FACT,
        importance: float | None = None,
        project: str | None = None,
        tags: Iterable[str] = (),
        provenance: Provenance | None = None,
        private_to: str | None = None,
    ) -> Memory:
        """Store a new memory with a fresh id; `project` defaults to the provenance's.
        `private_to` names the one agent that may recall it (None: shared)."""
        ...

    async def recall(
        self,
        query: str,
        *,
        project: str | None = None,
        limit: int = 10,
        since: datetime | None = None,
        until: datetime | None = None,
        types: Iterable[MemoryType] | None = None,
        all_projects: bool = False,
        order: RecallOrder = "score",
        agent: str | None = None,
    ) -> list[RecallResult]:
        """The best live memories for `query` (any text; an empty query ranks by weight).

        Memories private to an agent are returned only when `agent` is that agent
        (None: shared memories only).

        `project` keeps that project's memories and project-less ones; with
        `all_projects` every project is searched but that project's come first.
        `since` (inclusive) and `until` (exclusive) select memories whose
        conversation span, or creation time when there is none, overlaps them.
        `order="time"` lists the selected results oldest first, `order="recent"` newest
        first.
        """
        ...

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        """Count a real use of these memories (opened by id); best effort, never raises."""
        ...

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        """Forget a memory and its correction chain; False when there was nothing to forget."""
        ...

    async def forget_where(
        self,
        *,
        session_id: int | None = None,
        session_external_id: str | None = None,
        project: str | None = None,
        all: bool = False,
        hard: bool = False,
        as_of: datetime | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> int:
        """Forget in bulk (the given filters AND-ed, or `all=True`); returns how many versions.

        `as_of` is when the forget was asked for (default now): only memories stored by
        then are forgotten, and what the scope brings later counts from then (a forget
        replayed from the chain's outbox must not take what others saved meanwhile).
        `memory_ids` selects those versions exactly (retention), not their chains.

        Soft counts the memories newly tombstoned; hard counts every row deleted,
        tombstoned ones included. Selection is by each version's own session and
        project (corrections inherit both from the memory they correct).
        """
        ...

    async def correct(
        self,
        memory_id: str,
        new_content: str,
        *,
        reason: str | None = None,
        provenance: Provenance | None = None,
    ) -> Memory:
        """Supersede a live memory by a new correction; returns the new memory."""
        ...

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        """Store a segment once by its id; `created` is False if it was already stored."""
        ...

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        """Store a session summary once by its id."""
        ...

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        """Store a fact asked for in a message ("remember that …") once by its id."""
        ...

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        """Store an observation a model read out of a segment once by its id."""
        ...

    async def get(self, memory_id: str) -> Memory | None:
        """One memory, live, superseded or soft-deleted; None if unknown or hard-deleted."""
        ...

    async def history(self, memory_id: str) -> list[Memory]:
        """The correction chain holding `memory_id`, oldest first; [] if unknown."""
        ...

    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        """The audit records of forgotten memories, oldest first."""
        ...

    def export(self, project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every non-deleted memory (superseded ones too) as export records, sorted by id."""
        ...

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Import export records atomically, skipping known ids; returns how many were new."""
        ...

    async def close(self) -> None:
        """Release the store; safe to call twice."""
        ...
