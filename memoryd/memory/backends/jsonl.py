"""The JSONL memory backend: the last resort that always works.

One append-only file per project under a directory (`<state_dir>/memory-jsonl/`
by default; `_no_project.jsonl` for memories without one, `_scopes.jsonl` for
forgotten sessions and projects). Each line is one event, human-readable and
diffable:

    {"op": "add", "record": {...}}                      an export record (export_format.py)
    {"op": "supersede", "id": ..., "by": ..., "at": ...}   a correction or a longer tail
    {"op": "forget", "id": ..., "mode": "soft", ...}     a tombstone (never content)
    {"op": "use", "id": ..., "at": ...}                   opened by id (`record_use`)
    {"op": "evidence", "id": ..., "messages": [...], "at": ...}   what it rests on, grown
    {"op": "forgotten", "kind": ..., "value": ..., "at": ...}   in _scopes.jsonl

Every append is one `write` on an O_APPEND descriptor followed by `fsync`, so a
line is on disk before the call returns; a line cut short by a crash is skipped
when the file is read (the event it held never returned to its caller). A hard
forget is the one rewrite: the project's file is written again without the
forgotten content (temporary file, fsync, rename, directory fsync), leaving the
tombstone.

Recall reads the files once at open and keeps every memory in a dict: a last
resort holds little. Relevance is `gate.coverage` of the query's content words
(query words found, stem-matched), then the shared `ranking.blend` for
importance and recency. No vectors.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError, BackendUnavailable, StoreOwnedElsewhere
from memoryd.files import make_dirs
from memoryd.memory import writes
from memoryd.memory.backends.jsonl_files import (
    append_events,
    cut_partial_tail,
    file_name,
    read_events,
    rewrite_without,
)
from memoryd.memory.export_format import (
    from_utc_text,
    memory_to_record,
    record_to_memory,
    to_utc_text,
)
from memoryd.memory.models import (
    ConversationSegment,
    DeletionMode,
    DeletionRecord,
    DistilledMemory,
    ForgottenScope,
    Memory,
    MemoryType,
    Provenance,
    RecallResult,
    RequestedMemory,
    SaveResult,
    SessionSummary,
    chain_order,
    visible_to,
)
from memoryd.memory.policy import ForgetScope, is_forgotten
from memoryd.memory.protocol import Capability, RecallOrder
from memoryd.memory.recall import gate, per_session, ranking
from memoryd.memory.recall.words import terms

log = structlog.get_logger("memoryd.memory.jsonl")

BACKEND_NAME = "jsonl"
SCOPES = "_scopes.jsonl"
OWNER = "_owner"
_NEVER = datetime.min.replace(tzinfo=UTC)


class JsonlMemoryBackend:
    """Open with `await JsonlMemoryBackend.open(directory, clock=c)`."""

    name = BACKEND_NAME
    capabilities = frozenset({Capability.REMEMBER, Capability.RECALL, Capability.FORGET,
                              Capability.CORRECT, Capability.EXPORT, Capability.TEMPORAL})

    def __init__(self, directory: Path, clock: Clock) -> None:
        self._dir = directory
        self._clock = clock
        self._memories: dict[str, Memory] = {}
        self._deletions: list[DeletionRecord] = []
        self._hard: set[str] = set()
        self._scopes: dict[tuple[str, str], datetime] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, directory: Path, *, clock: Clock,
                   owner: str | None = None) -> JsonlMemoryBackend:
        """Open (or create) the directory; `owner`, when given, claims it for that user
        and refuses one another user claimed (StoreOwnedElsewhere)."""
        backend = cls(directory, clock)
        try:
            await asyncio.to_thread(backend._load)
            if owner is not None:
                await asyncio.to_thread(backend._claim, owner)
        except OSError as exc:
            raise BackendUnavailable(f"{directory}: {exc.strerror or exc}",
                                     backend=BACKEND_NAME) from exc
        return backend

    # -- files --------------------------------------------------------------------------

    def _load(self) -> None:
        make_dirs(self._dir)
        for path in sorted(self._dir.glob("*.jsonl")):
            cut_partial_tail(path)
            for number, event in enumerate(read_events(path), 1):
                try:
                    self._apply(event)
                except (KeyError, ValueError, TypeError):
                    log.warning("jsonl_bad_event_skipped", path=str(path), event=number)

    def _claim(self, owner: str) -> None:
        path = self._dir / OWNER
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            claimed = path.read_text(encoding="utf-8").strip()
            if claimed and claimed != owner:
                raise StoreOwnedElsewhere(
                    f"the memory directory {self._dir} belongs to user {claimed!r}, not"
                    f" {owner!r}: set memory.user to {claimed!r}, or give {owner!r} a"
                    " directory of their own", backend=BACKEND_NAME) from None
            if claimed:
                return
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            os.write(fd, owner.encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)

    def _apply(self, event: Mapping[str, Any]) -> None:
        op = event.get("op")
        if op == "add":
            try:
                memory = record_to_memory(event["record"])
            except (KeyError, ValueError):
                return
            if memory.id not in self._hard:
                self._memories.setdefault(memory.id, memory)
        elif op == "supersede" and event.get("id") in self._memories:
            old = self._memories[event["id"]]
            at = from_utc_text(event["at"])
            self._memories[old.id] = replace(old, superseded_by=event["by"], updated_at=at,
                                             reason=event.get("reason") or old.reason)
            new = self._memories.get(event["by"])
            if new is not None and new.supersedes is None:
                self._memories[new.id] = replace(new, supersedes=old.id)
        elif op == "forget":
            record = DeletionRecord(
                memory_id=event["id"], mode=DeletionMode(event["mode"]),
                type=MemoryType(event["type"]), project=event.get("project"),
                session_id=event.get("session_id"),
                session_external_id=event.get("session_external_id"),
                deleted_at=from_utc_text(event["at"]))
            self._deletions.append(record)
            if record.mode is DeletionMode.HARD:
                self._hard.add(record.memory_id)
                self._memories.pop(record.memory_id, None)
            elif record.memory_id in self._memories:
                old = self._memories[record.memory_id]
                self._memories[old.id] = replace(old, deleted_at=record.deleted_at,
                                                 updated_at=record.deleted_at)
        elif op == "evidence" and event.get("id") in self._memories:
            old = self._memories[event["id"]]
            grown = writes.grow_evidence(old.provenance.message_uuids,
                                         [str(u) for u in event.get("messages") or ()])
            self._memories[old.id] = replace(
                old, provenance=replace(old.provenance, message_uuids=tuple(grown)),
                updated_at=from_utc_text(event["at"]))
        elif op == "use" and event.get("id") in self._memories:
            old = self._memories[event["id"]]
            self._memories[old.id] = replace(old, access_count=old.access_count + 1,
                                             last_accessed_at=from_utc_text(event["at"]))
        elif op == "forgotten":
            key, at = (event["kind"], event["value"]), from_utc_text(event["at"])
            self._scopes[key] = max(at, self._scopes.get(key, at))

    async def _write(self, name: str, events: Sequence[Mapping[str, Any]]) -> None:
        if self._closed:
            raise BackendError("the memory backend is closed", backend=BACKEND_NAME)
        try:
            await asyncio.to_thread(append_events, self._dir, name, events)
        except OSError as exc:
            raise BackendUnavailable(f"{self._dir / name}: {exc.strerror or exc}",
                                     backend=BACKEND_NAME) from exc
        for event in events:
            self._apply(event)

    # -- protocol -----------------------------------------------------------------------

    async def is_available(self) -> bool:
        return not self._closed and await asyncio.to_thread(os.access, self._dir, os.W_OK)

    async def _add(self, memory: Memory) -> bool:
        if memory.id in self._memories or memory.id in self._hard:
            return False
        await self._write(file_name(memory.project),
                          [{"op": "add", "record": memory_to_record(memory)}])
        return True

    async def remember(self, content: str, *, type: MemoryType = MemoryType.FACT,
                       importance: float | None = None, project: str | None = None,
                       tags: Iterable[str] = (), provenance: Provenance | None = None,
                       private_to: str | None = None) -> Memory:
        memory = writes.new_memory(content, type=type, importance=importance, project=project,
                                   tags=tags, provenance=provenance, now=self._clock.now(),
                                   private_to=private_to)
        async with self._lock:
            await self._add(memory)
        return memory

    def _selected(self, memory: Memory, *, project: str | None, since: datetime | None,
                  until: datetime | None, types: set[str] | None, all_projects: bool,
                  agent: str | None) -> bool:
        if not memory.is_live or not visible_to(memory.private_to, agent):
            return False
        if project is not None and not all_projects and memory.project not in (project, None):
            return False
        if types is not None and memory.type.value not in types:
            return False
        prov = memory.provenance
        if since is not None and (prov.ended_at or prov.started_at or memory.created_at) < since:
            return False
        return until is None or (prov.started_at or memory.created_at) < until

    async def recall(self, query: str, *, project: str | None = None, limit: int = 10,
                     since: datetime | None = None, until: datetime | None = None,
                     types: Iterable[MemoryType] | None = None, all_projects: bool = False,
                     order: RecallOrder = "score", agent: str | None = None,
                     ) -> list[RecallResult]:
        for moment in (since, until):
            if moment is not None and moment.utcoffset() is None:
                raise ValueError("pass timezone-aware datetimes")
        wanted = None if types is None else {MemoryType(t).value for t in types}
        if limit <= 0 or wanted == set():
            return []
        now = self._clock.now()
        words = terms(query)
        scored: list[tuple[int, float, str, Memory, float]] = []
        for memory in self._memories.values():
            if not self._selected(memory, project=project, since=since, until=until,
                                  types=wanted, all_projects=all_projects, agent=agent):
                continue
            relevance = 1.0
            if words and order == "score":
                relevance = _relevance(words, memory)
                if relevance <= 0:
                    continue
            age = (now - (memory.provenance.ended_at or memory.created_at)).total_seconds()
            score = ranking.blend(relevance, memory.importance, memory.type, age / 86400.0,
                                  memory.access_count > 0)
            tier = 0 if project is None or memory.project in (project, None) else 1
            scored.append((tier, score, memory.id, memory, relevance))
        if order == "time":
            scored.sort(key=lambda s: ((s[3].provenance.started_at or s[3].created_at),
                                       s[3].created_at, s[2]))
        elif order == "recent":
            scored.sort(key=lambda s: (s[3].provenance.started_at or s[3].created_at,
                                       s[3].created_at), reverse=True)
        else:
            scored.sort(key=lambda s: (s[0], -s[1], s[2]))
        picked = [(p, 1) for p in range(min(limit, len(scored)))]
        if words and order == "score":  # a session counts once (`recall/per_session.py`)
            picked = per_session.first_of_each([per_session.key_of(
                m.type, m.provenance.source, m.provenance.session_external_id,
                m.provenance.session_id, m.project) for _, _, _, m, _ in scored], limit)
        return [RecallResult(
            memory_id=m.id, type=m.type, content=m.content, score=score,
            provenance=m.provenance, created_at=m.created_at, project=m.project,
            importance=m.importance, tags=m.tags, relevance=relevance, private_to=m.private_to,
            session_matches=count)
            for (_, score, _, m, relevance), count in ((scored[p], c) for p, c in picked)]

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        ids = [i for i in dict.fromkeys(memory_ids) if i in self._memories]
        try:
            async with self._lock:
                for memory_id in ids:
                    memory = self._memories[memory_id]
                    await self._write(file_name(memory.project), [
                        {"op": "use", "id": memory_id, "at": to_utc_text(self._clock.now())}])
        except BackendError as exc:
            log.warning("memory_use_not_recorded", backend=BACKEND_NAME, error=str(exc))

    async def add_evidence(self, memory_id: str, message_uuids: Sequence[str]) -> bool:
        async with self._lock:
            memory = self._memories.get(memory_id)
            if memory is None or not memory.is_live:
                return False
            have = memory.provenance.message_uuids
            added = writes.grow_evidence(have, message_uuids)[len(have):]
            if not added:
                return False
            await self._write(file_name(memory.project), [
                {"op": "evidence", "id": memory_id, "messages": added,
                 "at": to_utc_text(self._clock.now())}])
        return True

    def _chain(self, memory_id: str) -> list[Memory]:
        if memory_id not in self._memories:
            return []
        seen: dict[str, Memory] = {}
        todo = [memory_id]
        while todo:
            current = self._memories.get(todo.pop())
            if current is None or current.id in seen:
                continue
            seen[current.id] = current
            todo += [i for i in (current.supersedes, current.superseded_by) if i]
        return chain_order(list(seen.values()))

    async def _delete(self, targets: Sequence[Memory], *, hard: bool) -> int:
        chosen = list(targets) if hard else [m for m in targets if m.deleted_at is None]
        if not chosen:
            return 0
        at = to_utc_text(self._clock.now())
        mode = DeletionMode.HARD if hard else DeletionMode.SOFT
        by_file: dict[str, list[Memory]] = {}
        for memory in chosen:
            by_file.setdefault(file_name(memory.project), []).append(memory)
        for name, memories in by_file.items():
            await self._write(name, [
                {"op": "forget", "id": m.id, "mode": mode.value, "type": m.type.value,
                 "project": m.project, "session_id": m.provenance.session_id,
                 "session_external_id": m.provenance.session_external_id, "at": at}
                for m in memories])
            if hard:
                try:
                    await asyncio.to_thread(rewrite_without, self._dir, name,
                                            {m.id for m in memories})
                except OSError as exc:
                    raise BackendUnavailable(f"{self._dir / name}: {exc.strerror or exc}",
                                             backend=BACKEND_NAME) from exc
        return len(chosen)

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        async with self._lock:
            return await self._delete(self._chain(memory_id), hard=hard) > 0

    async def forget_where(self, *, session_id: int | None = None,
                           session_external_id: str | None = None, project: str | None = None,
                           all: bool = False, hard: bool = False,
                           as_of: datetime | None = None,
                           memory_ids: Sequence[str] | None = None) -> int:
        scope = ForgetScope(session_id, session_external_id, project, all, memory_ids)
        scope.check()
        wanted = None if memory_ids is None else set(memory_ids)

        def chosen(m: Memory) -> bool:
            if as_of is not None and m.created_at > as_of:
                return False
            return all or (
                (wanted is None or m.id in wanted)
                and (session_id is None or m.provenance.session_id == session_id)
                and (session_external_id is None
                     or m.provenance.session_external_id == session_external_id)
                and (project is None or m.project == project))

        async with self._lock:
            targets = [m for m in self._memories.values() if chosen(m)]
            count = await self._delete(targets, hard=hard)
            scopes = scope.lasting(m.provenance.session_external_id for m in targets)
            if scopes:
                at = to_utc_text(as_of or self._clock.now())
                await self._write(SCOPES, [{"op": "forgotten", "kind": k, "value": v, "at": at}
                                           for k, v in sorted(scopes)])
        return count

    def _forgotten(self, memory: Memory) -> bool:
        return is_forgotten(memory, self._scopes)

    async def correct(self, memory_id: str, new_content: str, *, reason: str | None = None,
                      provenance: Provenance | None = None) -> Memory:
        now = self._clock.now()
        async with self._lock:
            new = writes.correction(self._memories.get(memory_id), memory_id, new_content,
                                    reason=reason, provenance=provenance, now=now,
                                    backend=BACKEND_NAME)
            await self._write(file_name(new.project), [
                {"op": "add", "record": memory_to_record(new)},
                {"op": "supersede", "id": memory_id, "by": new.id, "at": to_utc_text(now)}])
        return self._memories[new.id]

    async def _save_once(self, memory: Memory, *, tails: bool = False) -> SaveResult:
        async with self._lock:
            if memory.type is MemoryType.OBSERVATION and memory.supersedes:
                # Only a live observation is replaced (a model never overrides a person).
                old = self._memories.get(memory.supersedes)
                if old is None or old.type is not MemoryType.OBSERVATION or not old.is_live:
                    memory = replace(memory, supersedes=None)
            created = not self._forgotten(memory) and await self._add(memory)
            if created and memory.type is MemoryType.SESSION_DIGEST:
                await self._supersede_digests(memory)
            if created and memory.type is MemoryType.OBSERVATION and memory.supersedes:
                await self._write(file_name(memory.project), [
                    {"op": "supersede", "id": memory.supersedes, "by": memory.id,
                     "at": to_utc_text(self._clock.now()),
                     "reason": "a later observation replaces it"}])
            if created and tails:
                p = memory.provenance
                shorter = sorted(
                    (m for m in self._memories.values()
                     if m.id != memory.id and m.type is MemoryType.CONVERSATION and m.is_live
                     and (m.provenance.session_id, m.provenance.session_external_id,
                          m.provenance.source, m.provenance.first_index)
                     == (p.session_id, p.session_external_id, p.source, p.first_index)
                     and (m.provenance.last_index or 0) < (p.last_index or 0)),
                    key=lambda m: m.provenance.last_index or 0)
                if shorter:
                    at = to_utc_text(self._clock.now())
                    await self._write(file_name(memory.project), [
                        {"op": "supersede", "id": m.id, "by": memory.id, "at": at,
                         "reason": "extended by a later save of the same messages"}
                        for m in shorter])
        return SaveResult(id=memory.id, created=created)

    async def _supersede_digests(self, new: Memory) -> None:
        """One live digest a session (see the embedded backend's `_supersede_digests`)."""
        p = new.provenance
        live = sorted(
            (m for m in self._memories.values()
             if m.id != new.id and m.type is MemoryType.SESSION_DIGEST and m.is_live
             and (m.provenance.session_id, m.provenance.session_external_id,
                  m.provenance.source) == (p.session_id, p.session_external_id, p.source)),
            key=lambda m: (m.provenance.last_index or -1, m.created_at))
        at = to_utc_text(self._clock.now())
        newer = [m for m in live if (m.provenance.last_index or -1) > (p.last_index or -1)]
        if newer:
            await self._write(file_name(new.project), [
                {"op": "supersede", "id": new.id, "by": newer[-1].id, "at": at}])
        elif live:
            await self._write(file_name(new.project), [
                {"op": "supersede", "id": m.id, "by": new.id, "at": at,
                 "reason": "a later digest of the same session"} for m in live])

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        return await self._save_once(writes.segment_memory(segment, self._clock.now()),
                                     tails=True)

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        return await self._save_once(writes.summary_memory(summary, self._clock.now()))

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        return await self._save_once(writes.requested_memory(requested, self._clock.now()))

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        return await self._save_once(writes.distilled_memory(distilled, self._clock.now()))

    async def get(self, memory_id: str) -> Memory | None:
        return self._memories.get(memory_id)

    async def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        return sorted(i for i in self._memories if i.startswith(prefix))[:limit]

    async def history(self, memory_id: str) -> list[Memory]:
        return self._chain(memory_id)

    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        return [d for d in self._deletions if memory_id is None or d.memory_id == memory_id]

    async def session_memories(self, session_id: int) -> list[Memory]:
        found = [m for m in self._memories.values() if m.provenance.session_id == session_id]
        return sorted(found, key=lambda m: (m.provenance.first_index or 0, m.created_at, m.id))

    async def daily_counts(self, since: datetime) -> list[tuple[str, str | None, int]]:
        counts: dict[tuple[str, str | None], int] = {}
        for m in self._memories.values():
            began = m.provenance.started_at or m.created_at
            if m.is_live and began >= since:
                key = (began.astimezone(UTC).date().isoformat(), m.project)
                counts[key] = counts.get(key, 0) + 1
        return sorted((day, project, n) for (day, project), n in counts.items())

    async def export(self, project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        for memory_id in sorted(self._memories):
            memory = self._memories[memory_id]
            if memory.deleted_at is None and (project is None or memory.project == project):
                yield memory_to_record(memory)

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        memories: list[Memory] = []
        for number, record in enumerate(records, 1):
            try:
                memory = record_to_memory(record)
            except ValueError as exc:
                raise BackendError(f"import record {number}: {exc}",
                                   backend=BACKEND_NAME) from exc
            memories.append(writes.imported(memory))
        created = 0
        async with self._lock:
            for memory in memories:
                if not self._forgotten(memory):
                    created += await self._add(memory)
        return created

    async def import_deletions(self, records: Iterable[DeletionRecord]) -> int:
        """Copy deletion records from another store; a hard one keeps its id out for good."""
        known = {(d.memory_id, d.mode, d.deleted_at) for d in self._deletions}
        fresh = [r for r in records if (r.memory_id, r.mode, r.deleted_at) not in known]
        async with self._lock:
            for r in fresh:
                await self._write(file_name(r.project), [{
                    "op": "forget", "id": r.memory_id, "mode": r.mode.value,
                    "type": r.type.value, "project": r.project, "session_id": r.session_id,
                    "session_external_id": r.session_external_id,
                    "at": to_utc_text(r.deleted_at)}])
        return len(fresh)

    async def forgotten_scopes(self) -> list[ForgottenScope]:
        return [ForgottenScope(kind, value, at)
                for (kind, value), at in sorted(self._scopes.items())]

    async def import_forgotten_scopes(self, scopes: Iterable[ForgottenScope]) -> int:
        """Keep scopes forgotten in another store forgotten here too; how many were new."""
        fresh = [s for s in scopes if s.at > self._scopes.get((s.kind, s.value), _NEVER)]
        async with self._lock:
            if fresh:
                await self._write(SCOPES, [{"op": "forgotten", "kind": s.kind, "value": s.value,
                                            "at": to_utc_text(s.at)} for s in fresh])
        return len(fresh)

    async def close(self) -> None:
        self._closed = True



def _relevance(words: list[str], memory: Memory) -> float:
    """The share of the query's words the memory mentions (stem-matched), in [0, 1]."""
    text = memory.content + " " + " ".join(memory.tags)
    return gate.coverage(" ".join(words), text) if gate.content_words(" ".join(words)) else (
        1.0 if any(w in text.lower() for w in words) else 0.0)
