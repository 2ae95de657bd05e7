"""The values that cross the memory backend protocol: memories, segments, results.

Every value is a frozen dataclass; datetimes are timezone-aware (UTC when they
come out of a backend). Ids are 32-character hex UUIDs: random (uuid4) for
memories people and agents create, name-based (uuid5) for records the daemon
saves automatically, so that saving the same thing twice yields the same id.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

# Fixed forever: changing it would change every deterministic id already stored.
_ID_NAMESPACE = uuid.UUID("6f1c0d2e-8a59-4b53-9b6e-2f0d3c7a4e11")


class MemoryType(enum.StrEnum):
    FACT = "fact"
    CORRECTION = "correction"
    CONVERSATION = "conversation"
    SESSION_SUMMARY = "session_summary"
    PROJECT_CONTEXT = "project_context"
    #: What one session asked, changed, ran, committed, concluded and left open, built
    #: from its records without a model (`lifecycle.digest`); one live version a session.
    SESSION_DIGEST = "session_digest"
    #: A fact, decision, preference or gotcha a model read out of a conversation segment
    #: (`distill`, off by default): never an explicit fact, so a model never overrides one.
    OBSERVATION = "observation"


DEFAULT_IMPORTANCE: dict[MemoryType, float] = {
    MemoryType.FACT: 0.9,
    MemoryType.CORRECTION: 0.9,
    MemoryType.PROJECT_CONTEXT: 0.8,
    MemoryType.CONVERSATION: 0.5,
    MemoryType.SESSION_SUMMARY: 0.5,
    # As the conversation it condenses: both are the session's record, weighed alike, so
    # a digest outranks a segment only by matching the question better.
    MemoryType.SESSION_DIGEST: 0.5,
    # Above the conversation it was read from, below what a person stated (0.9).
    MemoryType.OBSERVATION: 0.6,
}
"""Importance given when the caller passes none."""

DIGEST_KIND = "digest"
"""The `SessionSummary.kind` of a session digest: saved as a `session_digest` memory that
supersedes the session's previous digest (history kept, one live version)."""

REQUESTED_TAG = "requested"
"""The tag of a fact saved because a message asked for it ("remember that …")."""
REQUESTED_IMPORTANCE = 0.8
"""Such a fact's importance: below a fact stored on purpose, since it was read out of prose."""

DECAYING_TYPES: frozenset[MemoryType] = frozenset(
    {MemoryType.CONVERSATION, MemoryType.SESSION_SUMMARY, MemoryType.SESSION_DIGEST,
     MemoryType.OBSERVATION}
)
"""Auto-saved types whose weight fades with age unless they are recalled."""


class DeletionMode(enum.StrEnum):
    SOFT = "soft"
    HARD = "hard"


def visible_to(private_to: str | None, agent: str | None) -> bool:
    """Whether a memory private to `private_to` (None: shared) may be shown to `agent`
    (None: no agent, shared memories only)."""
    return private_to is None or private_to == agent


def new_memory_id() -> str:
    """A random, collision-safe memory id."""
    return uuid.uuid4().hex


def _session_key(session_external_id: str | None, session_id: int | None) -> str:
    # Both, when both are known: agents reuse session ids (forks, replays into new
    # files), and two sessions sharing a key would lose one's segments as "stored".
    parts = []
    if session_id is not None:
        parts.append(f"id:{session_id}")
    if session_external_id is not None:
        parts.append(f"ext:{session_external_id}")
    if not parts:
        raise ValueError("a session_external_id or a session_id is required")
    return "|".join(parts)


def _auto_id(what: str, source: str | None, session_external_id: str | None,
             session_id: int | None, *parts: object) -> str:
    """A name-based id: `what`, the source, the session key and `parts`, joined by US."""
    fields = [what, source or "", _session_key(session_external_id, session_id), *parts]
    return uuid.uuid5(_ID_NAMESPACE, "\x1f".join(str(f) for f in fields)).hex


def segment_id(
    *,
    source: str | None,
    session_external_id: str | None,
    session_id: int | None,
    first_index: int,
    last_index: int,
) -> str:
    """The deterministic id of a conversation segment.

    The session is identified by the daemon's session id together with the
    agent's external id, so two sessions that share an external id never collide.
    """
    return _auto_id("segment", source, session_external_id, session_id, first_index,
                    last_index)


def summary_id(
    *,
    source: str | None,
    session_external_id: str | None,
    session_id: int | None,
    kind: str,
    content: str,
) -> str:
    """The deterministic id of a session summary (the full content is hashed into it)."""
    return _auto_id("summary", source, session_external_id, session_id, kind, content)


def requested_memory_id(
    *,
    source: str | None,
    session_external_id: str | None,
    session_id: int | None,
    message_index: int,
    content: str,
) -> str:
    """The deterministic id of a memory asked for in a message ("remember that …")."""
    return _auto_id("requested", source, session_external_id, session_id, message_index,
                    content)


DISTILLED_TAG = "distilled"
"""The tag of an observation a model read out of a segment (its kind is tagged too)."""
DISTILLED_KINDS = ("fact", "decision", "preference", "gotcha")
"""What a model may read out of a segment (`Distilled.kind`)."""


def distilled_memory_id(*, source: str | None, session_external_id: str | None,
                        session_id: int | None, segment: str, kind: str, content: str) -> str:
    """The deterministic id of an observation read out of segment `segment`."""
    return _auto_id("distilled", source, session_external_id, session_id, segment, kind,
                    content)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a memory came from: the session, its message range and the conversation's span."""

    session_id: int | None = None
    session_external_id: str | None = None
    source: str | None = None
    project: str | None = None
    first_index: int | None = None
    last_index: int | None = None
    message_uuids: tuple[str, ...] = ()
    started_at: datetime | None = None
    ended_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory, with its place in a correction chain and its deletion state."""

    id: str
    content: str
    type: MemoryType
    importance: float
    project: str | None
    tags: tuple[str, ...]
    provenance: Provenance
    created_at: datetime
    updated_at: datetime
    superseded_by: str | None = None
    supersedes: str | None = None
    reason: str | None = None
    deleted_at: datetime | None = None
    #: Real uses: how often a person or an agent opened this memory by its id (never
    #: how often recall returned it), and when last.
    access_count: int = 0
    last_accessed_at: datetime | None = None
    #: The one agent (claude, codex, gemini, ...) that may recall this memory; None: every
    #: agent of its owner (see `visible_to`).
    private_to: str | None = None

    @property
    def is_live(self) -> bool:
        """Recallable: neither superseded nor deleted."""
        return self.superseded_by is None and self.deleted_at is None


@dataclass(frozen=True, slots=True)
class Turn:
    """Words the person or the agent said in a segment's message: no tool call or result,
    no reasoning, no system or injected text. What a conversational memory service
    (the Memory Gateway) is given instead of the rendered segment."""

    index: int  # the message's index in its session
    role: str  # "user" or "assistant"
    text: str
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ConversationSegment:
    """A run of consecutive messages of one session, rendered to text by the caller.

    `id` is computed from (source, session, first_index, last_index) by `segment_id`.
    """

    source: str | None
    session_id: int | None
    session_external_id: str | None
    project: str | None
    first_index: int
    last_index: int
    text: str
    message_uuids: tuple[str, ...] = ()
    started_at: datetime | None = None
    ended_at: datetime | None = None
    tags: tuple[str, ...] = ()
    importance: float | None = None
    #: The person's and the agent's words, message by message (see Turn); not part of the id.
    turns: tuple[Turn, ...] = ()
    #: The agent whose private memory this is (`memory.private_agents`); not part of the id.
    private_to: str | None = None
    id: str = field(init=False)

    def __post_init__(self) -> None:
        if self.first_index < 0 or self.last_index < self.first_index:
            raise ValueError(f"bad message range {self.first_index}..{self.last_index}")
        sid = segment_id(
            source=self.source,
            session_external_id=self.session_external_id,
            session_id=self.session_id,
            first_index=self.first_index,
            last_index=self.last_index,
        )
        object.__setattr__(self, "id", sid)

    @property
    def provenance(self) -> Provenance:
        return _provenance_of(self)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """A summary of a session (Claude `summary`/compaction, Codex `compacted`).

    `id` is computed by `summary_id` from the session, `kind` and the full content.
    """

    source: str | None
    session_id: int | None
    session_external_id: str | None
    project: str | None
    kind: str
    content: str
    first_index: int | None = None
    last_index: int | None = None
    message_uuids: tuple[str, ...] = ()
    started_at: datetime | None = None
    ended_at: datetime | None = None
    importance: float | None = None
    private_to: str | None = None
    id: str = field(init=False)

    def __post_init__(self) -> None:
        sid = summary_id(
            source=self.source,
            session_external_id=self.session_external_id,
            session_id=self.session_id,
            kind=self.kind,
            content=self.content,
        )
        object.__setattr__(self, "id", sid)

    @property
    def provenance(self) -> Provenance:
        return _provenance_of(self)


@dataclass(frozen=True, slots=True)
class RequestedMemory:
    """A fact someone asked their agent to remember, in so many words, in one message.

    `id` is computed by `requested_memory_id` from the session, the message and the
    content, so recovery saving the same message again stores nothing new.
    """

    source: str | None
    session_id: int | None
    session_external_id: str | None
    project: str | None
    message_index: int
    content: str
    message_uuid: str | None = None
    said_at: datetime | None = None
    private_to: str | None = None
    id: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.content.strip():
            raise ValueError("a requested memory needs some content")
        object.__setattr__(self, "id", requested_memory_id(
            source=self.source, session_external_id=self.session_external_id,
            session_id=self.session_id, message_index=self.message_index, content=self.content,
        ))

    @property
    def provenance(self) -> Provenance:
        return Provenance(
            session_id=self.session_id, session_external_id=self.session_external_id,
            source=self.source, project=self.project, first_index=self.message_index,
            last_index=self.message_index,
            message_uuids=(self.message_uuid,) if self.message_uuid else (),
            started_at=self.said_at, ended_at=self.said_at,
        )


@dataclass(frozen=True, slots=True)
class DistilledMemory:
    """An observation a model read out of one conversation segment, resting on the messages
    `first_index`..`last_index` of its session (the ones it cited).

    `id` is computed by `distilled_memory_id` from the session, the segment, the kind and
    the content: the same answer stored again (after a crash) stores nothing new.
    """

    source: str | None
    session_id: int | None
    session_external_id: str | None
    project: str | None
    segment: str  # the id of the segment it was read from
    kind: str  # one of DISTILLED_KINDS
    content: str
    first_index: int
    last_index: int
    message_uuids: tuple[str, ...] = ()
    started_at: datetime | None = None
    ended_at: datetime | None = None
    private_to: str | None = None
    #: The earlier observation of the project this one contradicts or updates (never a
    #: fact or correction someone stated): it is superseded, history kept.
    replaces: str | None = None
    id: str = field(init=False)

    def __post_init__(self) -> None:
        if self.kind not in DISTILLED_KINDS:
            raise ValueError(f"an observation is one of {', '.join(DISTILLED_KINDS)}")
        if not self.content.strip():
            raise ValueError("an observation needs some content")
        if self.first_index < 0 or self.last_index < self.first_index:
            raise ValueError(f"bad message range {self.first_index}..{self.last_index}")
        object.__setattr__(self, "id", distilled_memory_id(
            source=self.source, session_external_id=self.session_external_id,
            session_id=self.session_id, segment=self.segment, kind=self.kind,
            content=self.content))

    @property
    def provenance(self) -> Provenance:
        return Provenance(
            session_id=self.session_id, session_external_id=self.session_external_id,
            source=self.source, project=self.project, first_index=self.first_index,
            last_index=self.last_index, message_uuids=self.message_uuids,
            started_at=self.started_at, ended_at=self.ended_at)


@dataclass(frozen=True, slots=True)
class RecallResult:
    """One recalled memory, best first in a result list."""

    memory_id: str
    type: MemoryType
    content: str
    score: float
    provenance: Provenance
    created_at: datetime
    project: str | None = None
    importance: float = 0.0
    tags: tuple[str, ...] = ()
    #: The part of `content` that matched (hybrid recall: the best chunks, joined by
    #: "…"); None when the whole content is the match. `provenance` then covers
    #: just those chunks' messages.
    excerpt: str | None = None
    #: How well the memory matches the query, in [0, 1], before importance and recency
    #: weigh in (1.0 without query words): what a relevance threshold compares.
    relevance: float = 1.0
    #: The backend that answered, when recall went through a chain of them (`chain.py`).
    layer: str | None = None
    #: The agent this memory is private to (see `Memory.private_to`).
    private_to: str | None = None
    #: How many of the memories ranked for this query came from the same session as this
    #: one, which stands for them all (`recall/per_session.py`); 1 for a memory on its own.
    session_matches: int = 1
    #: How close in meaning the memory is to the query: its chunks' best cosine
    #: similarity (0 when none was among the vector channel's candidates); None when
    #: vectors took no part in this recall (no model, or the memory not embedded yet).
    similarity: float | None = None


@dataclass(frozen=True, slots=True)
class SaveResult:
    """The outcome of an idempotent save: `created` is False when the id was already known."""

    id: str
    created: bool


@dataclass(frozen=True, slots=True)
class DeletionRecord:
    """The audit trail of a forget: what was deleted, how and when (never the content)."""

    memory_id: str
    mode: DeletionMode
    type: MemoryType
    project: str | None
    session_id: int | None
    session_external_id: str | None
    deleted_at: datetime


@dataclass(frozen=True, slots=True)
class ForgottenScope:
    """A session or project that was forgotten: what it later brings is never saved.

    `kind` is `session` (the agent's session id), `session_id` (memoryd's own session
    number on this machine, `value` without any origin) or `project`; `at` is when.
    """

    kind: str
    value: str
    at: datetime


def _provenance_of(item: ConversationSegment | SessionSummary) -> Provenance:
    """Segments and summaries name their session and messages the same way."""
    return Provenance(
        session_id=item.session_id,
        session_external_id=item.session_external_id,
        source=item.source,
        project=item.project,
        first_index=item.first_index,
        last_index=item.last_index,
        message_uuids=item.message_uuids,
        started_at=item.started_at,
        ended_at=item.ended_at,
    )


def chain_order(memories: Sequence[Memory]) -> list[Memory]:
    """Oldest version first, following `superseded_by` links."""
    by_id = {m.id: m for m in memories}
    roots = [m for m in memories if m.supersedes not in by_id]
    ordered: list[Memory] = []
    for root in sorted(roots, key=lambda m: (m.created_at, m.id)):
        current: Memory | None = root
        while current is not None and current not in ordered:
            ordered.append(current)
            current = by_id.get(current.superseded_by or "")
    return ordered
