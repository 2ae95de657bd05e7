"""The configured extra patterns (`privacy.extra_patterns`), applied before a backend stores.

Secrets and personal data are masked by `redaction.redact` wherever text enters
memory. What a team adds (internal ticket ids, customer names) is masked here, at
one boundary: `MaskedBackend` wraps every configured layer and masks the text of
every write (remember, correct, segments and their turns, summaries, facts asked
for, imports) before the layer sees it. So nothing it matches is stored,
embedded, or sent to a remote layer. Everything else is passed through as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from daemon.memory.models import (
    ConversationSegment,
    Memory,
    MemoryType,
    Provenance,
    RequestedMemory,
    SaveResult,
    SessionSummary,
)
from daemon.memory.protocol import MemoryBackend
from daemon.memory.redaction import ExtraMasks, mask_extra


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
                       tags: Iterable[str] = (), provenance: Provenance | None = None) -> Memory:
        return await self._inner.remember(self._mask(content), type=type, importance=importance,
                                          project=project, tags=tags, provenance=provenance)

    async def correct(self, memory_id: str, new_content: str, *, reason: str | None = None,
                      provenance: Provenance | None = None) -> Memory:
        return await self._inner.correct(memory_id, self._mask(new_content),
                                         reason=reason and self._mask(reason),
                                         provenance=provenance)

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        return await self._inner.save_conversation_segment(replace(
            segment, text=self._mask(segment.text),
            turns=tuple(replace(t, text=self._mask(t.text)) for t in segment.turns)))

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        # The id hashes the content: it is the one the unmasked summary would have had, so
        # saving it again (masked the same way) still stores it once.
        masked = replace(summary, content=self._mask(summary.content))
        object.__setattr__(masked, "id", summary.id)
        return await self._inner.save_session_summary(masked)

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        masked = replace(requested, content=self._mask(requested.content))
        object.__setattr__(masked, "id", requested.id)
        return await self._inner.save_requested_memory(masked)

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        return await self._inner.import_records(
            {**record, "content": self._mask(record["content"])}
            if isinstance(record, Mapping) and isinstance(record.get("content"), str)
            else record for record in records)
