"""The configured extra patterns (`privacy.extra_patterns`), applied before memory stores them.

Secrets and personal data are masked by `redaction.redact` wherever text enters
memory. What a team adds (internal ticket ids, customer names) is masked here, at
one boundary: `MaskedBackend` wraps the configured backend, and the chain masks
the same way before its outbox and its layers. The text of every write
(remember, correct, segments and their turns, summaries, facts asked for,
imports) is masked before any layer sees it, so nothing it matches is stored,
embedded, or sent to a remote layer. Everything else is passed through as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from memoryd.memory.models import (
    ConversationSegment,
    DistilledMemory,
    Memory,
    MemoryType,
    Provenance,
    RequestedMemory,
    SaveResult,
    SessionSummary,
)
from memoryd.memory.privacy.redaction import ExtraMasks, mask_extra
from memoryd.memory.protocol import (
    ContentRewrite,
    MemoryBackend,
    prepare_segments,
    save_segments,
)


def masked_segment(segment: ConversationSegment, masks: ExtraMasks) -> ConversationSegment:
    return replace(segment, text=mask_extra(segment.text, masks),
                   turns=tuple(replace(t, text=mask_extra(t.text, masks))
                               for t in segment.turns))


def masked_summary(summary: SessionSummary, masks: ExtraMasks) -> SessionSummary:
    # The id hashes the content: it stays the one the unmasked summary had, so saving it
    # again (masked the same way) still stores it once.
    masked = replace(summary, content=mask_extra(summary.content, masks))
    object.__setattr__(masked, "id", summary.id)
    return masked


def masked_requested(requested: RequestedMemory, masks: ExtraMasks) -> RequestedMemory:
    masked = replace(requested, content=mask_extra(requested.content, masks))
    object.__setattr__(masked, "id", requested.id)
    return masked


def masked_distilled(distilled: DistilledMemory, masks: ExtraMasks) -> DistilledMemory:
    masked = replace(distilled, content=mask_extra(distilled.content, masks))
    object.__setattr__(masked, "id", distilled.id)
    return masked


def masked_record(record: Mapping[str, Any], masks: ExtraMasks) -> Mapping[str, Any]:
    if isinstance(record, Mapping) and isinstance(record.get("content"), str):
        return {**record, "content": mask_extra(record["content"], masks)}
    return record


class _MaskedSegments(tuple[ConversationSegment, ...]):
    """Segments masked by one `MaskedBackend`, as its inner backend prepared them."""

    owner: object
    prepared: Sequence[ConversationSegment]

    def __new__(cls, masked: Sequence[ConversationSegment], *, owner: object,
                prepared: Sequence[ConversationSegment]) -> _MaskedSegments:
        made = super().__new__(cls, masked)
        made.owner, made.prepared = owner, prepared
        return made


class MaskedBackend:
    """`inner` with `masks` applied to the text of every write."""

    def __init__(self, inner: MemoryBackend, masks: ExtraMasks) -> None:
        self._inner = inner
        self._masks = masks

    def __getattr__(self, name: str) -> Any:
        # Reads, forgetting, the vector queue, closing: exactly the inner backend's.
        return getattr(self._inner, name)

    @property
    def inner(self) -> MemoryBackend:
        return self._inner

    def _mask(self, text: str) -> str:
        return mask_extra(text, self._masks)

    async def remember(self, content: str, *, type: MemoryType = MemoryType.FACT,
                       importance: float | None = None, project: str | None = None,
                       tags: Iterable[str] = (), provenance: Provenance | None = None,
                       private_to: str | None = None) -> Memory:
        return await self._inner.remember(self._mask(content), type=type, importance=importance,
                                          project=project, tags=tags, provenance=provenance,
                                          private_to=private_to)

    async def correct(self, memory_id: str, new_content: str, *, reason: str | None = None,
                      provenance: Provenance | None = None) -> Memory:
        return await self._inner.correct(memory_id, self._mask(new_content),
                                         reason=reason and self._mask(reason),
                                         provenance=provenance)

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        return await self._inner.save_conversation_segment(masked_segment(segment, self._masks))

    def prepare_conversation_segments(
            self, segments: Sequence[ConversationSegment]) -> Sequence[ConversationSegment]:
        # Defined here, not left to `__getattr__`: the inner backend prepares masked text.
        masked = [masked_segment(s, self._masks) for s in segments]
        return _MaskedSegments(masked, owner=self, prepared=prepare_segments(self._inner, masked))

    async def save_conversation_segments(
            self, segments: Sequence[ConversationSegment]) -> list[SaveResult]:
        if isinstance(segments, _MaskedSegments) and segments.owner is self:
            return await save_segments(self._inner, segments.prepared)  # masked once
        masked = [masked_segment(s, self._masks) for s in segments]
        return await save_segments(self._inner, masked)

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        return await self._inner.save_session_summary(masked_summary(summary, self._masks))

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        return await self._inner.save_requested_memory(masked_requested(requested, self._masks))

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        return await self._inner.save_distilled_memory(masked_distilled(distilled, self._masks))

    async def rewrite_content(self, memory_id: str, content: str) -> bool:
        inner = self._inner
        if not isinstance(inner, ContentRewrite):
            return False
        return await inner.rewrite_content(memory_id, self._mask(content))

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        return await self._inner.import_records(masked_record(r, self._masks) for r in records)
