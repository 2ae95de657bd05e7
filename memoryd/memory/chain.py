"""The backend chain: memory layers in order, graceful fallback, nothing lost or doubled.

`memory.backends` lists the layers, primary first (e.g. `[postgres, sqlite, jsonl]`
or `[gateway, sqlite]`). The chain is itself a MemoryBackend:

- **Saves** go to the primary. When it is down (BackendUnavailable, or it cannot
  be opened), the save is first recorded in the durable outbox for the primary
  (`outbox.py`), then stored in the first lower layer that takes it, and the
  call returns: the sync index moves only once the segment is durably in some
  layer. While the primary has entries waiting, new saves queue behind them the
  same way, so the primary receives a session's segments in order (a longer
  save of a tail supersedes the shorter one only when it comes after it).
- **Draining** (`drain`, a daemon job) replays the primary's entries oldest first
  with the same ids once it answers again. A layer stores an id once, so an entry
  replayed twice (a crash between the replay and its deletion) doubles nothing.
- **Reads** ask the layers in order and return the first that answers; every
  result names its layer (`RecallResult.layer`). When the layer that answered
  keeps conversation only (the gateway), recall also asks the next layer that
  keeps facts and summaries, and merges both by score.
- **Forgetting** reaches every layer that can forget (fallback copies included);
  a primary that is down gets it from the outbox later. A layer that cannot
  forget (the gateway) is named in `cannot(Capability.FORGET)`, so callers can
  say its copy remains. Corrections need the layer that holds the memory:
  primary first, then the others.
- Layers open lazily: a primary that is down when the daemon starts costs
  nothing but a retry every OPEN_RETRY seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from memoryd.clock import Clock
from memoryd.errors import (
    BackendError,
    BackendOutcomeUnknown,
    BackendUnavailable,
    BackendUnsupported,
)
from memoryd.memory import draining, writes
from memoryd.memory.export_format import memory_to_record, to_utc_text
from memoryd.memory.layers import Layer
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
from memoryd.memory.outbox import Depth, Outbox, encode
from memoryd.memory.privacy.masking import (
    masked_distilled,
    masked_record,
    masked_requested,
    masked_segment,
    masked_summary,
)
from memoryd.memory.privacy.redaction import ExtraMasks, mask_extra
from memoryd.memory.protocol import (
    Capability,
    ContentRewrite,
    EvidenceGrowth,
    MemoryBackend,
    MemoryBrowse,
    ProjectRelabel,
    RecallOrder,
    Relabelled,
    release_memory,
    vector_queue,
)

if TYPE_CHECKING:
    from memoryd.memory.embeddings.interface import Embedder

log = structlog.get_logger("memoryd.memory.chain")

DRAIN_BATCH = 100

T = TypeVar("T")


class ChainBackend:
    """Layers in order with a durable outbox for the primary (see the module docstring)."""

    name = "chain"

    def __init__(self, layers: Sequence[Layer], outbox: Outbox, clock: Clock,
                 capabilities: Mapping[str, frozenset[Capability]],
                 masks: ExtraMasks = ()) -> None:
        if not layers:
            raise ValueError("a chain needs at least one layer")
        self.layers = list(layers)
        self.outbox = outbox
        self._clock = clock
        # What each layer can do, known before it is opened (from its kind).
        self._declared = dict(capabilities)
        self._drain_lock = asyncio.Lock()
        #: `privacy.extra_patterns`, masked before the outbox or any layer sees the text.
        self._masks = masks

    @property
    def primary(self) -> Layer:
        return self.layers[0]

    @property
    def capabilities(self) -> frozenset[Capability]:
        caps: set[Capability] = set()
        for layer in self.layers:
            backend = layer.backend
            caps |= backend.capabilities if backend is not None else self._declared[layer.name]
        return frozenset(caps)

    def cannot(self, capability: Capability) -> list[str]:
        """The layers that cannot do `capability` (e.g. a gateway keeps what is forgotten)."""
        return [layer.name for layer in self.layers
                if capability not in self._declared[layer.name]]

    @property
    def embedder(self) -> Embedder | None:
        """The first open layer's embedder (every layer is given the same one)."""
        for layer in self.layers:
            queue = vector_queue(layer.backend)
            if queue is not None:
                return queue.embedder
        return None

    # -- reads ------------------------------------------------------------------------

    async def _first(self, capability: Capability,
                     call: Callable[[MemoryBackend], Awaitable[T]],
                     accept: Callable[[T], bool] = lambda _: True) -> tuple[T, str]:
        """The first layer's answer that `accept`s, asking down the chain past failures
        (a read falls back on any failure of a layer, not only on one that is down)."""
        errors: list[BackendError] = []
        answer: tuple[T, str] | None = None
        for layer in self.layers:
            if capability not in self._declared[layer.name]:
                continue
            try:
                result = await call(await layer.get())
            except BackendUnsupported:
                continue
            except BackendError as exc:
                log.warning("memory_layer_read_failed", layer=layer.name, error=str(exc))
                errors.append(exc)
                continue
            if accept(result):
                return result, layer.name
            answer = answer or (result, layer.name)
        if answer is not None:
            return answer
        if errors and all(isinstance(e, BackendUnavailable) for e in errors):
            raise BackendUnavailable("no memory layer answered: "
                                     + "; ".join(str(e) for e in errors), backend=self.name)
        if errors:
            raise errors[0]
        raise BackendUnsupported(f"cannot {capability.value}", backend=self.name)

    async def is_available(self) -> bool:
        for layer in self.layers:
            if await layer.available():
                return True
        return False

    async def recall(self, query: str, *, project: str | None = None, limit: int = 10,
                     since: datetime | None = None, until: datetime | None = None,
                     types: Iterable[MemoryType] | None = None, all_projects: bool = False,
                     order: RecallOrder = "score", agent: str | None = None,
                     ) -> list[RecallResult]:
        wanted = None if types is None else list(types)
        # A layer without time filters (the gateway) would answer a temporal question wrongly.
        needs = (Capability.TEMPORAL if since is not None or until is not None
                 or order != "score" else Capability.RECALL)
        def ask(backend: MemoryBackend) -> Awaitable[list[RecallResult]]:
            return backend.recall(query, project=project, limit=limit, since=since,
                                  until=until, types=wanted, all_projects=all_projects,
                                  order=order, agent=agent)

        results, layer = await self._first(needs, ask)
        answered = [replace(r, layer=layer) for r in results]
        if Capability.REMEMBER in self._declared[layer]:
            return answered
        # The layer that answered keeps conversation only (the gateway): facts, corrections
        # and summaries live in the next layer that keeps them, so it is asked too.
        for other in self.layers:
            if other.name == layer or not {Capability.REMEMBER, needs} <= self._declared[
                    other.name]:
                continue
            try:
                more = await ask(await other.get())
            except BackendError as exc:
                log.warning("memory_layer_read_failed", layer=other.name, error=str(exc))
                continue
            merged = answered + [replace(r, layer=other.name) for r in more]
            return sorted(merged, key=lambda r: -min(r.score, 1.0))[:limit]
        return answered

    async def get(self, memory_id: str) -> Memory | None:
        memory, _ = await self._first(Capability.RECALL, lambda b: b.get(memory_id),
                                      accept=lambda m: m is not None)
        return memory

    async def history(self, memory_id: str) -> list[Memory]:
        chain, _ = await self._first(Capability.RECALL, lambda b: b.history(memory_id),
                                     accept=bool)
        return chain

    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        records, _ = await self._first(Capability.FORGET,
                                       lambda b: b.deletions(memory_id=memory_id))
        return records

    async def export(self, project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        for layer in self.layers:
            if Capability.EXPORT not in self._declared[layer.name]:
                continue
            try:
                backend = await layer.get()
                if not await backend.is_available():
                    continue
            except BackendUnavailable:
                continue
            async for record in backend.export(project):
                yield record
            return
        raise BackendUnavailable("no memory layer can export right now", backend=self.name)

    async def relabel_project(self, old: str, new: str) -> Relabelled:
        """Move project `old`'s memories to `new` in every layer that can; `moved` counts
        the layer that moved most, `unmoved` names the layers that cannot (the gateway,
        the JSONL file) or could not be reached."""
        moved, unmoved = 0, []
        for layer in self.layers:
            try:
                backend = await layer.get()
            except BackendUnavailable as exc:
                log.warning("memory_layer_relabel_skipped", layer=layer.name, error=exc.detail)
                unmoved.append(layer.name)
                continue
            if not isinstance(backend, ProjectRelabel):
                unmoved.append(layer.name)
                continue
            done = await backend.relabel_project(old, new)
            moved = max(moved, done.moved)
            unmoved += done.unmoved
        return Relabelled(moved, tuple(unmoved))

    async def rewrite_content(self, memory_id: str, content: str) -> bool:
        """The text rewritten in every layer that can and is up (the others keep the old
        text, which says the same less cleanly); True if any layer rewrote it."""
        content = mask_extra(content, self._masks)
        done = False
        async for backend in self._layers_up():
            if isinstance(backend, ContentRewrite):
                done = await backend.rewrite_content(memory_id, content) or done
        return done

    async def add_evidence(self, memory_id: str, message_uuids: Sequence[str]) -> bool:
        """The evidence grown in every layer that can and is up (the others keep what the
        memory rested on first); True if any layer added some."""
        done = False
        async for backend in self._layers_up():
            if isinstance(backend, EvidenceGrowth):
                done = await backend.add_evidence(memory_id, message_uuids) or done
        return done

    async def _layers_up(self) -> AsyncIterator[MemoryBackend]:
        """Each layer's backend, in order, passing over those that are down."""
        for layer in self.layers:
            try:
                yield await layer.get()
            except BackendUnavailable:
                continue

    async def session_memories(self, session_id: int) -> list[Memory]:
        found, _ = await self._first(Capability.RECALL, lambda b: _browse(b).session_memories(
            session_id))
        return found

    async def daily_counts(self, since: datetime) -> list[tuple[str, str | None, int]]:
        found, _ = await self._first(Capability.RECALL, lambda b: _browse(b).daily_counts(since))
        return found

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        for layer in self.layers:
            try:
                await (await layer.get()).record_use(memory_ids)
            except BackendUnavailable:
                continue
            return

    # -- writes -----------------------------------------------------------------------

    async def _save(self, op: str, key: str, payload: dict[str, Any],
                    call: Callable[[MemoryBackend], Awaitable[SaveResult]],
                    needs: Capability | None = None) -> SaveResult:
        primary = self.primary
        if needs is not None and needs not in self._declared[primary.name]:
            # The primary never stores this kind (a gateway keeps no single facts): it goes
            # to the first layer that does, and nothing waits for the primary.
            return await self._fallback(op, key, call)
        parked_because = None
        if not await self.outbox.has_waiting(primary.name):
            try:
                return await call(await primary.get())
            except BackendOutcomeUnknown as exc:
                # Maybe applied, maybe not: kept for a person, never resent by itself.
                log.error("memory_save_outcome_unknown", layer=primary.name, op=op, key=key,
                          error=str(exc))
                parked_because = str(exc)
            except BackendUnavailable as exc:
                log.warning("memory_primary_unavailable", layer=primary.name, op=op, key=key,
                            error=exc.detail)
        # Recorded first: a crash after the fallback save cannot leave the primary without it.
        await self.outbox.add(primary.name, op, key, payload, parked_because=parked_because)
        return await self._fallback(op, key, call)

    async def _fallback(self, op: str, key: str,
                        call: Callable[[MemoryBackend], Awaitable[T]]) -> T:
        errors: list[str] = []
        for layer in self.layers[1:]:
            try:
                result = await call(await layer.get())
            except BackendUnavailable as exc:
                errors.append(str(exc))
                continue
            except BackendUnsupported:
                continue
            log.info("memory_saved_to_fallback", layer=layer.name, op=op, key=key)
            return result
        # The outbox holds it; the primary gets it when it is back. The caller retries
        # too (the sync index did not move), which adds nothing: the entry exists.
        raise BackendUnavailable("no memory layer took it (kept in the outbox): "
                                 + "; ".join(errors or ["no other layer"]), backend=self.name)

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        segment = masked_segment(segment, self._masks)
        return await self._save("segment", segment.id, encode(segment),
                                lambda b: b.save_conversation_segment(segment))

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        summary = masked_summary(summary, self._masks)
        return await self._save("summary", summary.id, encode(summary),
                                lambda b: b.save_session_summary(summary), Capability.REMEMBER)

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        requested = masked_requested(requested, self._masks)
        return await self._save("requested", requested.id, encode(requested),
                                lambda b: b.save_requested_memory(requested),
                                Capability.REMEMBER)

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        distilled = masked_distilled(distilled, self._masks)
        return await self._save("distilled", distilled.id, encode(distilled),
                                lambda b: b.save_distilled_memory(distilled),
                                Capability.REMEMBER)

    async def remember(self, content: str, *, type: MemoryType = MemoryType.FACT,
                       importance: float | None = None, project: str | None = None,
                       tags: Iterable[str] = (), provenance: Provenance | None = None,
                       private_to: str | None = None) -> Memory:
        content = mask_extra(content, self._masks)
        primary = self.primary
        remembers = Capability.REMEMBER in self._declared[primary.name]
        # The id is chosen here, once: the primary, the outbox and a fallback layer all hold
        # the same memory, so a save whose commit was lost with the connection and is then
        # replayed from the outbox is stored once (imports skip known ids).
        memory = writes.new_memory(content, type=type, importance=importance, project=project,
                                   tags=tags, provenance=provenance, now=self._clock.now(),
                                   private_to=private_to)
        record = memory_to_record(memory)
        if remembers and not await self.outbox.has_waiting(primary.name):
            try:
                await (await primary.get()).import_records([record])
            except BackendUnavailable as exc:
                log.warning("memory_primary_unavailable", layer=primary.name, op="remember",
                            error=exc.detail)
            else:
                log.info("memory_remembered", layer=primary.name, memory_id=memory.id,
                         type=memory.type.value, project=memory.project)
                return memory
        if remembers:
            await self.outbox.add(primary.name, "record", memory.id, record)
        await self._fallback("record", memory.id, lambda b: b.import_records([record]))
        return memory

    async def correct(self, memory_id: str, new_content: str, *, reason: str | None = None,
                      provenance: Provenance | None = None) -> Memory:
        """Corrected in the first layer that holds the memory and can correct."""
        new_content = mask_extra(new_content, self._masks)
        reason = reason and mask_extra(reason, self._masks)
        errors: list[str] = []
        for index, layer in enumerate(self.layers):
            if Capability.CORRECT not in self._declared[layer.name]:
                continue
            try:
                backend = await layer.get()
                if await backend.get(memory_id) is None:
                    continue
                if index > 0 and await self.outbox.has_waiting(self.primary.name):
                    # Corrected here, it would reach the primary uncorrected when the outbox
                    # replays the original: refused until the primary has it.
                    raise BackendUnavailable(
                        f"memory {memory_id} has not reached the {self.primary.name} layer"
                        " yet (it waits in the outbox); correct it once that layer is back",
                        backend=self.name)
                return await backend.correct(memory_id, new_content, reason=reason,
                                             provenance=provenance)
            except BackendUnavailable as exc:
                errors.append(str(exc))
        if errors:
            raise BackendUnavailable("the layer holding the memory is down: "
                                     + "; ".join(errors), backend=self.name)
        raise BackendError(f"no memory {memory_id}", backend=self.name)

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        return bool(await self._forget_everywhere(
            "forget", f"{memory_id}:{'hard' if hard else 'soft'}",
            {"memory_id": memory_id, "hard": hard},
            lambda b: b.forget(memory_id, hard=hard)))

    async def forget_where(self, *, session_id: int | None = None,
                           session_external_id: str | None = None, project: str | None = None,
                           all: bool = False, hard: bool = False,
                           as_of: datetime | None = None,
                           memory_ids: Sequence[str] | None = None) -> int:
        at = as_of or self._clock.now()
        args: dict[str, Any] = {
            "session_id": session_id, "session_external_id": session_external_id,
            "project": project, "all": all, "hard": hard}
        key = ":".join(str(args[k]) for k in sorted(args)) + f"@{at.isoformat()}"
        if memory_ids is not None:
            args["memory_ids"] = list(memory_ids)
            key += ":" + hashlib.sha256("\n".join(args["memory_ids"]).encode()).hexdigest()
        # Replayed later, it forgets what was stored by the time it was asked, no more.
        payload = {**args, "as_of": to_utc_text(at)}
        return int(await self._forget_everywhere(
            "forget_where", key, payload, lambda b: b.forget_where(**args, as_of=at)))

    async def _forget_everywhere(self, op: str, key: str, payload: dict[str, Any],
                                 call: Callable[[MemoryBackend], Awaitable[bool | int]]
                                 ) -> bool | int:
        """Every layer that can forget does; a primary that is down gets it from the outbox."""
        total: bool | int = 0
        for index, layer in enumerate(self.layers):
            if Capability.FORGET not in self._declared[layer.name]:
                continue
            try:
                if index == 0 and await self.outbox.has_waiting(layer.name):
                    raise BackendUnavailable("entries still waiting", backend=layer.name)
                total = max(total, await call(await layer.get()))
            except BackendUnavailable:
                if index == 0:
                    await self.outbox.add(layer.name, op, key, payload)
        return total

    # -- the outbox ---------------------------------------------------------------------

    async def drain(self, limit: int = DRAIN_BATCH) -> int:
        """Replay up to `limit` waiting entries to the primary, oldest first; how many landed."""
        async with self._drain_lock:
            return await draining.drain(self.primary, self.outbox, limit)

    async def depth(self) -> list[Depth]:
        return await self.outbox.depth()

    async def resolve_parked(self, *, applied: bool) -> int:
        """A person decided about the parked entries whose answers were lost: `applied`
        (they arrived: drop them) or not (send them again at the next drain). Entries
        parked behind them (later saves of the same session, never sent) go again
        either way. Returns how many entries were resolved."""
        return await draining.resolve_parked(self.layers, self.outbox, applied=applied)

    # -- background work of the layers --------------------------------------------------

    async def pending_embeddings(self) -> int:
        total = 0
        for layer in self.layers:
            queue = vector_queue(layer.backend)
            if queue is not None:
                try:
                    total += await queue.pending_embeddings()
                except BackendUnavailable:
                    continue
        return total

    async def embed_pending(self, limit: int = 256) -> int:
        for layer in self.layers:
            queue = vector_queue(layer.backend)
            if queue is not None:
                try:
                    done = await queue.embed_pending(limit=limit)
                except BackendUnavailable:
                    continue
                if done:
                    return done
        return 0

    async def release_memory(self) -> None:
        for layer in self.layers:
            await release_memory(layer.backend)
        await self.outbox.release_memory()

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Into the primary; while it is down (or its outbox waits), into the next layer
        with each record queued for the primary (same ids: replayed once)."""
        batch = [masked_record(r, self._masks) for r in records]
        primary = self.primary
        if Capability.EXPORT not in self._declared[primary.name]:
            count, _ = await self._first(Capability.EXPORT, lambda b: b.import_records(batch))
            return count
        if not await self.outbox.has_waiting(primary.name):
            try:
                return await (await primary.get()).import_records(batch)
            except BackendUnavailable as exc:
                log.warning("memory_primary_unavailable", layer=primary.name, op="import",
                            error=exc.detail)
        for record in batch:
            await self.outbox.add(primary.name, "record", str(record["id"]), dict(record))
        return await self._fallback("import", f"{len(batch)} records",
                                    lambda b: b.import_records(batch))

    async def close(self) -> None:
        for layer in self.layers:
            try:
                await layer.close()
            except BackendError as exc:
                log.warning("memory_layer_close_failed", layer=layer.name, error=str(exc))
        await self.outbox.close()


def _browse(backend: MemoryBackend) -> MemoryBrowse:
    if not isinstance(backend, MemoryBrowse):
        raise BackendUnsupported("cannot list a session's memories", backend=backend.name)
    return backend
