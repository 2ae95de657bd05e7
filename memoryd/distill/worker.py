"""The background drain of the distillation queue (`store.distill_queue`).

The daemon calls `Distiller.run` every few seconds. A pass takes the oldest jobs the
rate allows (`memory.llm.per_minute`, a token bucket), within the day's token budget
(`memory.llm.daily_tokens`, UTC days), one at a time:

1. the segment's messages still visible (nothing forgotten) are rendered, masked and
   numbered (`prompt`), for a project the settings admit;
2. the model answers; its items are checked (`answer`), masked again, and committed to
   the queue before any is stored: a kill after the model answered never asks again;
3. each item is compared with the project's memories (normalised text, and meaning when
   vectors are on): a duplicate is counted, not stored; the rest are stored as
   `observation` memories under deterministic ids (a kill before the job is marked done
   stores nothing twice), with the session's provenance, so forgetting the session
   forgets them.

A provider that is down or rate-limited stops the pass and is tried again after a
back-off; one that refuses the credentials waits longer. Neither counts against the
segment. An answer that fails its checks twice, or a request refused as such, skips
the segment. Every call is an audit record (provider, model, tokens, outcome; never
text or key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.distill.answer import Item, decode_items, encode_items, parse_answer
from memoryd.distill.prompt import build_prompt
from memoryd.distill.providers import Completion, Provider, counted
from memoryd.errors import BackendError, DistillError, DistillRefused, DistillUnavailable
from memoryd.lifecycle.segments import new_copies
from memoryd.memory import DistilledMemory, MemoryBackend, MemoryType, RecallResult
from memoryd.memory.privacy.redaction import shown
from memoryd.memory.protocol import EvidenceGrowth
from memoryd.store import distill_queue as queue
from memoryd.store import sessions as store
from memoryd.store.audit import AuditEvent
from memoryd.store.sessions import SessionSyncState, StoredMessage

log = structlog.get_logger("memoryd.distill")

#: Seconds before a provider that was down or rate-limited is asked again (doubling).
BACKOFF_MIN, BACKOFF_MAX = 30.0, 1800.0
#: Seconds before a provider that refused the credentials or the model is asked again.
REFUSED_WAIT = 3600.0
#: Cosine similarity from which an item means what a memory of the project says.
SAME_MEANING = 0.92
#: Memories of the project an item is compared with.
COMPARED = 5
#: Observations of the project shown to the model as ones it may replace, and how much of
#: what the person said in the segment finds them.
KNOWN, KNOWN_QUERY_CHARS = 8, 1000
_COMPARED_TYPES = (MemoryType.OBSERVATION, MemoryType.FACT, MemoryType.CORRECTION,
                   MemoryType.PROJECT_CONTEXT)


@dataclass(slots=True)
class DistillReport:
    jobs: int = 0
    stored: int = 0
    duplicates: int = 0
    skipped: int = 0
    tokens: int = 0
    #: Why the pass stopped before the queue or the rate did (backing off, budget).
    stopped: str | None = None


class _ProviderDown(Exception):
    """The provider failed for a reason that is not the segment's: stop the pass."""


def _normalised(text: str) -> str:
    return " ".join("".join(c for c in text.casefold() if c.isalnum() or c.isspace()).split())


class Distiller:
    def __init__(self, conn: aiosqlite.Connection, backend: MemoryBackend, clock: Clock,
                 settings: Settings, provider: Provider, *,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self._conn = conn
        self._backend = backend
        self._clock = clock
        self._settings = settings
        self._llm = settings.memory.llm
        self._provider = provider
        self._stopping = stopping
        self._masks = settings.extra_masks()
        # A full bucket: a restarted daemon takes up its backlog at once, at the rate.
        self._allowance = max(1.0, self._llm.per_minute)
        self._refilled = clock.monotonic()
        self._resume_at = 0.0
        self._backoff = BACKOFF_MIN / 2
        self._budget_day: str | None = None  # the day the budget ran out (said once)

    @property
    def conn(self) -> aiosqlite.Connection:
        return self._conn

    async def close(self) -> None:
        await self._provider.close()

    @property
    def model(self) -> str:
        return f"{self._provider.name}:{self._llm.model or 'default'}"

    def _refill(self) -> None:
        now = self._clock.monotonic()
        rate = self._llm.per_minute / 60.0
        self._allowance = min(max(1.0, self._llm.per_minute),
                              self._allowance + (now - self._refilled) * rate)
        self._refilled = now

    async def run(self, max_jobs: int | None = None) -> DistillReport:
        """One pass: the jobs the rate allows now (or `max_jobs`, rate aside)."""
        report = DistillReport()
        if self._clock.monotonic() < self._resume_at:
            report.stopped = "backing off"
            return report
        self._refill()
        tried: set[str] = set()  # a job is tried once a pass (a failed one waits for the next)
        while not self._stopping():
            if max_jobs is None and self._allowance < 1.0:
                break
            if max_jobs is not None and report.jobs >= max_jobs:
                break
            if await self._budget_spent():
                report.stopped = "daily budget spent"
                break
            job = next((j for j in await queue.waiting(self._conn, len(tried) + 1,
                                                       self._clock.now())
                        if j.segment_id not in tried), None)
            if job is None:
                break
            tried.add(job.segment_id)
            self._allowance -= 1.0
            report.jobs += 1
            if not await self._job(job, report):
                break
        if report.jobs:
            log.info("distilled", jobs=report.jobs, stored=report.stored,
                     duplicates=report.duplicates, skipped=report.skipped,
                     tokens=report.tokens, stopped=report.stopped)
        return report

    async def _budget_spent(self) -> bool:
        now = self._clock.now()
        spent = await queue.tokens_on(self._conn, now)
        if spent < self._llm.daily_tokens:
            return False
        day = now.date().isoformat()
        if self._budget_day != day:
            self._budget_day = day
            log.warning("distill_budget_spent", day=day, tokens=spent,
                        daily_tokens=self._llm.daily_tokens)
        return True

    async def _job(self, job: queue.Job, report: DistillReport) -> bool:
        """Do one job; False when the pass must stop (the provider failed)."""
        session = await store.get_sync_state(self._conn, job.session_id)
        # A resumed conversation's copies reach memory once (`Copies`), and a model once.
        messages = await store.visible_messages(self._conn, job.session_id, job.first_index,
                                                job.last_index, copies=new_copies())
        if session is None or not messages:
            await self._skip(job, "nothing left to read (forgotten, or copies of earlier"
                                  " messages)", report)
            return True
        if not self._llm.projects.admits(session.project):
            await self._skip(job, "project not admitted (memory.llm.projects)", report)
            return True
        if job.state == "answered" and job.answer is not None:
            items = decode_items(job.answer)
        else:
            try:
                asked = await self._ask(job, session, messages, report)
            except _ProviderDown:
                return False
            if asked is None:
                return True  # skipped, or to be tried again: the pass goes on
            items = asked
        try:
            stored, duplicates = await self._store(job, session, messages, items)
        except BackendError as exc:
            if exc.transient:
                # Kept `answered`: stored on a later pass, the same ids, nothing asked again.
                report.stopped = "memory backend unavailable"
                return False
            await self._skip(job, f"the memory backend refused it: {exc}", report)
            return True
        await queue.finish(self._conn, job.segment_id, now=self._clock.now(), stored=stored,
                           duplicates=duplicates)
        report.stored += stored
        report.duplicates += duplicates
        return True

    async def _ask(self, job: queue.Job, session: SessionSyncState,
                   messages: list[StoredMessage], report: DistillReport,
                   ) -> list[Item] | None:
        """The model's checked items, committed to the queue; None when the job was
        skipped or will be tried again; _ProviderDown when the pass must stop."""
        roots = (session.worktree, session.project)
        known = await self._known_observations(messages, session.project,
                                               self._private_to(session))
        prompt = build_prompt(messages, job.first_index, job.last_index, self._masks, roots,
                              [(key, text) for key, (_, text) in known.items()])
        if not prompt.lines:
            await self._skip(job, "nothing to send", report)
            return None
        now = self._clock.now()
        try:
            completion = counted(await self._provider.complete(prompt.system, prompt.user),
                                 prompt.system, prompt.user)
        except DistillRefused as exc:
            skipped = await queue.record_failure(
                self._conn, job.segment_id, str(exc), now=now,
                audit=self._audit(session, "refused", detail=str(exc)))
            report.skipped += skipped
            return None
        except DistillError as exc:
            await queue.record_failure(
                self._conn, job.segment_id, str(exc), now=now, counted=False,
                audit=self._audit(session, "unavailable", detail=str(exc)))
            self._back_off(exc)
            report.stopped = "provider failed"
            raise _ProviderDown from None
        self._backoff = BACKOFF_MIN / 2
        tokens = completion.tokens_in + completion.tokens_out
        report.tokens += tokens
        try:
            items = [self._masked(i, known) for i in parse_answer(
                completion.text, prompt.shown, provider=self._provider.name, known=known)]
        except DistillRefused as exc:
            skipped = await queue.record_failure(
                self._conn, job.segment_id, str(exc), now=now, tokens=tokens,
                audit=self._audit(session, "malformed", completion, detail=str(exc)))
            log.info("distill_answer_malformed", segment=job.segment_id, skipped=skipped)
            report.skipped += skipped
            return None
        taken = await queue.record_answer(
            self._conn, job.segment_id, encode_items(items), tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out, now=now,
            audit=self._audit(session, "ok", completion, count=len(items)))
        return items if taken else None

    def _masked(self, item: Item, known: dict[str, tuple[str, str]]) -> Item:
        # A model may echo a secret it was never shown whole, or one the masks missed in
        # another form: its words are masked like every memory write. What it replaces
        # is kept as the memory's id (the keys live only as long as the prompt).
        return Item(item.kind, shown(item.content, self._masks), item.evidence,
                    known[item.replaces][0] if item.replaces in known else None)

    async def _known_observations(self, messages: list[StoredMessage], project: str | None,
                                  private_to: str | None) -> dict[str, tuple[str, str]]:
        """The project's observations closest to what the segment's person said, by key
        (k1, k2, ...): (memory id, text). A model may replace only these: of the same
        visibility as what it reads now (a private agent's item never hides a shared
        observation from the other agents, nor the reverse)."""
        said = " ".join(m.content for m in messages if m.role == "user")[:KNOWN_QUERY_CHARS]
        if not said.strip():
            return {}
        found = await self._backend.recall(said, project=project, limit=KNOWN,
                                           types=[MemoryType.OBSERVATION], agent=private_to)
        return {f"k{n}": (r.memory_id, r.content) for n, r in enumerate(
            (r for r in found if r.project == project and r.private_to == private_to), 1)}

    def _private_to(self, session: SessionSyncState) -> str | None:
        return (session.source if session.source in self._settings.memory.private_agents
                else None)

    async def _store(self, job: queue.Job, session: SessionSyncState,
                     messages: list[StoredMessage], items: list[Item]) -> tuple[int, int]:
        by_number = {m.index - job.first_index: m for m in messages}
        stored = duplicates = 0
        for item in items:
            cited = [by_number[n] for n in item.evidence if n in by_number]
            if not cited:
                continue  # rests only on messages forgotten since
            known = await self._known(item, session.project, self._private_to(session))
            if known is not None:
                # Said again elsewhere: the memory that says it rests on these too.
                if known.type is MemoryType.OBSERVATION and isinstance(self._backend,
                                                                        EvidenceGrowth):
                    await self._backend.add_evidence(
                        known.memory_id, [m.uuid for m in cited if m.uuid])
                duplicates += 1
                continue
            stamps = [m.timestamp for m in cited if m.timestamp is not None]
            result = await self._backend.save_distilled_memory(DistilledMemory(
                source=session.source, session_id=session.id,
                session_external_id=session.external_id, project=session.project,
                segment=job.segment_id, kind=item.kind, content=item.content,
                first_index=cited[0].index, last_index=cited[-1].index,
                message_uuids=tuple(m.uuid for m in cited if m.uuid),
                started_at=min(stamps) if stamps else None,
                ended_at=max(stamps) if stamps else None,
                private_to=self._private_to(session), replaces=item.replaces))
            stored += result.created
            duplicates += not result.created
        return stored, duplicates

    async def _known(self, item: Item, project: str | None,
                     private_to: str | None) -> RecallResult | None:
        """The memory of the project that already says this (the same words once
        normalised, or the same meaning by the vectors), if any, among those the
        session's agent may recall."""
        found = await self._backend.recall(item.content, project=project, limit=COMPARED,
                                           types=_COMPARED_TYPES, agent=private_to)
        wanted = _normalised(item.content)
        # The memory it replaces says something close by nature: not a duplicate.
        return next((r for r in found
                     if r.project == project and r.memory_id != item.replaces
                     and (_normalised(r.content) == wanted
                          or (r.similarity is not None and r.similarity >= SAME_MEANING))),
                    None)

    async def _skip(self, job: queue.Job, why: str, report: DistillReport) -> None:
        await queue.finish(self._conn, job.segment_id, now=self._clock.now(), skipped=why)
        report.skipped += 1

    def _back_off(self, exc: DistillError) -> None:
        if isinstance(exc, DistillUnavailable):
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            wait = max(self._backoff, exc.retry_after or 0.0)
        else:
            wait = REFUSED_WAIT
        self._resume_at = self._clock.monotonic() + wait
        log.warning("distill_provider_failed", provider=self._provider.name, error=str(exc),
                    retry_in=round(wait, 1))

    def _audit(self, session: SessionSyncState, outcome: str,
               completion: Completion | None = None, *, count: int | None = None,
               detail: str | None = None) -> AuditEvent:
        """The call's audit record (provider, model, tokens, outcome; never text or key),
        written in the transaction that records the call's outcome in the queue."""
        tokens = (f" tokens_in={completion.tokens_in} tokens_out={completion.tokens_out}"
                  if completion is not None else "")
        return AuditEvent(
            interface="daemon", action="distill", outcome=outcome, agent=session.source,
            agent_session_id=session.external_id, count=count,
            detail=f"{self.model}{tokens}" + (f": {detail}" if detail else ""))
