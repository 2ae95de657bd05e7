"""Recovery: every stored message reaches the memory backend, through `memory_sync_index`.

For each session with messages past its `memory_sync_index`, the messages are
cut into segments (`segments.plan_segments`); each segment that is due is saved
with `save_conversation_segment`, and only then is the index advanced past it.
A segment's id is deterministic and the backend stores an id once, so a crash
between the save and the index update neither loses nor duplicates anything.

With each segment, the "remember that …" requests in its user messages
(`extraction`) are saved as `fact` memories of their own, also before the index
moves and also with deterministic ids.

A segment is due when a cut closes it (a compaction boundary, an idle gap, the
size bound), or, for the open tail, when the session has been quiet for
`sync_delay`, is paused or ended, its first message was written more than
`sync_max_lag` ago (a conversation that never pauses still reaches memory, and a
backfilled old transcript does not wait), or a sync is forced. A backend that fails
leaves the index where it was; transient failures are retried briefly
(tenacity) and the session is then backed off, so nothing is ever skipped.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError
from memoryd.lifecycle.digest import Digest
from memoryd.lifecycle.digest_builder import DigestBuilder
from memoryd.lifecycle.extraction import Request, extract_requests
from memoryd.lifecycle.pipeline import Candidates, PageKey, PageReader, Saving, Turn
from memoryd.lifecycle.segments import SegmentPlan, new_copies, plan_segments
from memoryd.lifecycle.sync_policy import RecoveryPolicy, answered_up_to, retrying, tail_due
from memoryd.memory import (
    DIGEST_KIND,
    ConversationSegment,
    MemoryBackend,
    RequestedMemory,
    SaveResult,
    SessionSummary,
)
from memoryd.memory.privacy.redaction import redact
from memoryd.memory.protocol import prepare_segments, save_segments
from memoryd.store import sessions as store
from memoryd.store.audit import AuditEvent
from memoryd.store.copies import Copies
from memoryd.store.distill_queue import Queued
from memoryd.store.forgotten import summary_forgotten
from memoryd.store.sessions import SessionSyncState

log = structlog.get_logger("memoryd.recovery")

#: Messages read per page; a segment never needs more than its size bound anyway.
PAGE = 500
#: Digests a pass builds before it saves them, and digests it reads a page: a backfill
#: of thousands of sessions held every one until the pass ended (20 MB for 6,000 short
#: sessions), and Python keeps the heap such a peak leaves behind.
DIGESTS_IN_HAND = 128
#: Sessions a pass reads at a time, for the same reason.
SESSIONS_PAGE = 256
BACKOFF_MIN, BACKOFF_MAX = 2.0, 300.0

#: Segments saved per memory transaction: one commit for many (a commit costs an fsync,
#: several milliseconds, more than a segment's rows, and each commit's FTS5 flush is a
#: new index segment to merge later: 128 a batch took a fifth less of the store thread's
#: time than 32 on one long session), few enough that one batch stays a short write
#: while recall and hooks wait for the database (the recovery benchmark's full pass:
#: p50 25 ms, p99 0.16 s, longest 0.2 s). A batch gathers a session's pages.
BATCH_SEGMENTS = 128



@dataclass(slots=True)
class SyncReport:
    sessions: int = 0
    segments_saved: int = 0
    segments_already_stored: int = 0
    messages_synced: int = 0
    summaries_saved: int = 0
    requests_saved: int = 0
    digests_saved: int = 0
    failed_sessions: list[int] = field(default_factory=list)



@dataclass(frozen=True, slots=True)
class _Built:
    """A session's digest built by this pass from the messages it saved before `end`."""

    end: int
    digest: Digest


def _digest_builder(session: SessionSyncState) -> DigestBuilder:
    return DigestBuilder(source=session.source, session=session.external_id or str(session.id),
                         project=session.project, worktree=session.worktree)


class Recovery:
    def __init__(
        self, conn: aiosqlite.Connection, backend: MemoryBackend, clock: Clock,
        policy: RecoveryPolicy | None = None, stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self._conn = conn
        # The daemon is stopping: a pass ends at its next safe point (after a batch's
        # index moved), well within the shutdown grace, whatever is left to save.
        self._stopping = stopping
        self._backend = backend
        self._clock = clock
        self.policy = policy or RecoveryPolicy()
        self._backoff: dict[int, tuple[float, float]] = {}  # session -> (retry at, delay)
        # This pass's digests built from the messages it saved (`_Built`), by session.
        self._built: dict[int, _Built] = {}
        # Subagents' sessions as far as this pass's digests of their parents took them.
        self._absorbed: dict[int, int] = {}
        # Where each session's copies were looked for up to (`Copies`): a live
        # session's next pass starts where the last ended, without reading its past.
        self._copies: dict[int, Copies] = {}

    async def run(self, *, force: bool = False, session_id: int | None = None,
                  settle_questions: bool = False) -> SyncReport:
        """One recovery pass over every session with unsynced messages (or just one).

        A live session's last question still waiting for its answer is held back from a
        timed pass (`force` False) and from one that asks (`settle_questions`, the sync
        after an agent's turn): saved alone, a question would be a memory of its own that
        outranks the answer it asked for. It is saved with that answer, or alone once it
        is `sync_max_lag` old or its session pauses or ends; a forced sync (`memoryd
        sync`, a session's end, compaction, another session's start) saves it as it is.
        """
        report = SyncReport()
        self._built = {}
        self._absorbed = {}
        candidates = Candidates(self._conn, session_id, SESSIONS_PAGE)
        saving = Saving()
        pages = PageReader(self._conn, self._copies, PAGE)
        try:
            while (session := await candidates.next()) is not None:
                if self._stopping():
                    break
                if self._waits(session, force=force):
                    continue
                pages.next_up = self._first_page(candidates.waiting, force=force)
                await self._sync_session(session, force=force, report=report, saving=saving,
                                         settle=settle_questions or not force, pages=pages)
                if len(self._built) >= DIGESTS_IN_HAND:
                    await saving.settle()  # a digest is saved once its messages are
                    await self._sync_digests(report, sorted(self._built))
                    self._built.clear()  # any not saved are built again from the store
            await saving.settle()
        finally:
            await saving.abandon()
            await pages.close()
        report.sessions = len(saving.touched)
        await self._sync_summaries(session_id, report)
        await self._sync_digests(report, None if session_id is None else [session_id])
        if (report.segments_saved or report.summaries_saved or report.requests_saved
                or report.digests_saved):
            log.info("synced", sessions=report.sessions, segments=report.segments_saved,
                     messages=report.messages_synced, summaries=report.summaries_saved,
                     requested_memories=report.requests_saved, digests=report.digests_saved)
        return report

    def _first_page(self, later: Iterable[SessionSyncState], *,
                    force: bool) -> PageKey | None:
        """The page `_read_and_save` reads first for the next of `later` it will save."""
        for session in later:
            if self._waits(session, force=force):
                continue
            index = session.memory_sync_index
            if not self.policy.passes_over(session) and index < session.message_count:
                return session.id, index, index == 0
        return None

    async def _sync_session(
        self, session: SessionSyncState, *, force: bool, report: SyncReport, saving: Saving,
        settle: bool, pages: PageReader,
    ) -> None:
        index = session.memory_sync_index
        if self.policy.passes_over(session):
            # What memoryd itself sent a model, or an agent's compaction of a session: never
            # the user's memory (the parent holds the summary).
            await store.advance_sync_index(self._conn, session.id, index,
                                           session.message_count)
            return
        # A session saved from its first message has its digest built from the messages
        # read here (`_sync_digests` uses it when every one of them was saved), instead of
        # reading them all a second time; a later pass rebuilds it from the store.
        building = _digest_builder(session) if index == 0 else None
        fed_to = await self._read_and_save(session, index, force=force, report=report,
                                           saving=saving, settle=settle, building=building,
                                           pages=pages)
        if building is not None and fed_to > 0:
            self._built[session.id] = _Built(fed_to, building.finish())

    async def _read_and_save(
        self, session: SessionSyncState, index: int, *, force: bool, report: SyncReport,
        saving: Saving, settle: bool, building: DigestBuilder | None, pages: PageReader,
    ) -> int:
        """Save the session's messages from `index` on, batch by batch, feeding `building`
        the messages of each batch it starts saving; the index past the last of those."""
        if index >= session.message_count:
            return index
        raw = building is not None
        # The next page is read (on the store's thread) while this one is cut and saved;
        # the open tail of a page is kept and cut again with the next, not read again.
        reading: asyncio.Future[list[store.StoredMessage]] | None = pages.read(
            session.id, index, raw)
        read_to = index
        kept: list[store.StoredMessage] = []
        # After a cut found no closed segment, cut again only once twice as much is in
        # hand: a segment of many pages (a long forgotten run) is cut a few times, not
        # once a page.
        cut_at = 0
        pending: list[SegmentPlan] = []  # closed segments not saved yet
        try:
            while reading is not None:
                if self._stopping():
                    return index
                fresh = await reading
                reading = None
                read_to += len(fresh)
                more = len(fresh) == PAGE and read_to < session.message_count
                if more:
                    reading = pages.read(session.id, read_to, raw)
                else:
                    pages.read_next_up()
                messages = kept + fresh if kept else fresh
                if not more and settle:
                    messages = messages[:answered_up_to(self.policy, self._clock, session,
                                                        messages)]
                if more and len(messages) < cut_at:
                    kept = messages
                    continue
                ready: list[SegmentPlan] = []
                if messages:
                    plans = plan_segments(messages, max_chars=self.policy.max_chars,
                                          idle_gap=self.policy.idle_gap,
                                          project=(session.worktree, session.project))
                    # The last plan may still grow: with the next page, or with messages
                    # not written yet.
                    ready, tail = plans[:-1], plans[-1]
                    cut_at = 2 * len(messages) if more and not ready else 0
                    if not more and (force or tail_due(self.policy, self._clock, session, tail)):
                        ready.append(tail)
                    kept = list(tail.messages) if more else []
                # Closed segments wait for a whole batch across pages (a long session's
                # batches are one commit and one index flush for many pages, not one a
                # page); the last page saves what is left.
                pending += ready
                while len(pending) >= BATCH_SEGMENTS or (pending and not more):
                    batch, pending = pending[:BATCH_SEGMENTS], pending[BATCH_SEGMENTS:]
                    if self._stopping():
                        return index
                    if not await self._start_batch(session, index, batch, report=report,
                                                   saving=saving, building=building):
                        return index
                    index = batch[-1].last_index + 1
        finally:
            if reading is not None:
                reading.cancel()
                with suppress(asyncio.CancelledError, Exception):
                    await reading
        return index

    async def _store_batch(
        self, session: SessionSyncState, index: int, batch: list[SegmentPlan],
        segments: Sequence[ConversationSegment], requests: list[list[Request]],
        report: SyncReport, saving: Saving, turn: Turn,
    ) -> bool:
        """Save one batch in one memory transaction, then move the index past all of it: a
        crash in between saves the same ids again, stored once. False if the session
        must stop here (its backend failed, or another sync moved its index)."""
        try:
            try:
                saved = iter(await self._save(segments, report) if segments else [])
                events = []
                start = index
                for plan, asked in zip(batch, requests, strict=True):
                    if not plan.text:
                        start = plan.last_index + 1
                        continue
                    result = next(saved)
                    requested = await self._save_requests(session, asked, report)
                    # The daemon's own writes are in the audit trail too (never their text).
                    events.append(AuditEvent(
                        interface="daemon", action="save_segment", agent=session.source,
                        agent_session_id=session.external_id,
                        memory_ids=(result.id, *requested),
                        count=plan.last_index + 1 - start,
                        detail=None if result.created else "already stored"))
                    start = plan.last_index + 1
            except BackendError as exc:
                turn.wrote(False)
                report.failed_sessions.append(session.id)
                delay = self._back_off(session.id)
                log.warning("sync_failed", session_id=session.id, backend=exc.backend,
                            error=str(exc), transient=exc.transient, retry_in=delay)
                return False
            turn.wrote(True)
            # The next batch writes its memories meanwhile; the index moves in order, and
            # not past a batch before whose index did not move.
            if turn.before is not None and not await turn.before and turn.same_session:
                return False
        finally:
            turn.wrote(False)  # stopped before its memories were written
        distills = self.policy.distills
        queued = [Queued(s.id, s.first_index, s.last_index) for s in segments
                  ] if distills is not None and distills(session.project) else []
        if not await store.advance_sync_index(
            self._conn, session.id, index, start, audit_events=events, now=self._clock.now(),
            distill=queued,
        ):
            log.info("sync_index_moved_elsewhere", session_id=session.id)
            return False
        report.messages_synced += start - index
        saving.touched.add(session.id)
        self._backoff.pop(session.id, None)
        return True

    async def _start_batch(
        self, session: SessionSyncState, index: int, batch: list[SegmentPlan], *,
        report: SyncReport, saving: Saving, building: DigestBuilder | None,
    ) -> bool:
        """Prepare `batch` and start saving it (`_store_batch`) once the batch before has
        written its memories, then feed `building` its messages; False (nothing started)
        when that batch stopped the session."""
        # A run of forgotten messages or copies only is passed over.
        # The batch before is saved (on the memory store's thread) while this
        # one is prepared, down to its rows: the store's thread waits for
        # nothing but Python's lock once that one is written.
        segments = prepare_segments(self._backend, [
            self._segment(session, plan) for plan in batch if plan.text])
        requests = [extract_requests(m for m in plan.messages
                                     if not m.passed_over)
                    if plan.text else [] for plan in batch]
        # This one starts once that one's memories are written (its index
        # moves meanwhile, see `Saving`).
        if not await saving.hand_over(session.id):
            return False
        await saving.start(session.id, functools.partial(
            self._store_batch, session, index, batch, segments, requests, report,
            saving))
        if building is not None:
            # While the batch is saved on the store's thread.
            for plan in batch:
                for message in plan.messages:
                    if not message.passed_over:
                        building.add(message)
        return True


    async def _save(self, segments: Sequence[ConversationSegment],
                    report: SyncReport) -> list[SaveResult]:
        results = await retrying(
            self.policy, lambda batch: save_segments(self._backend, batch), segments)
        for result in results:
            if result.created:
                report.segments_saved += 1
            else:
                report.segments_already_stored += 1
        return results

    def _segment(self, session: SessionSyncState, plan: SegmentPlan) -> ConversationSegment:
        kept = [m for m in plan.messages if not m.passed_over]
        timestamps = [m.timestamp for m in kept if m.timestamp is not None]
        return ConversationSegment(
            source=session.source,
            session_id=session.id,
            session_external_id=session.external_id,
            project=session.project,
            first_index=plan.first_index,
            last_index=plan.last_index,
            text=plan.text,
            message_uuids=tuple(m.uuid for m in kept if m.uuid),
            started_at=min(timestamps) if timestamps else None,
            ended_at=max(timestamps) if timestamps else None,
            turns=plan.turns,
            private_to=self.policy.private_to(session.source),
        )

    async def _save_requests(self, session: SessionSyncState, requests: list[Request],
                             report: SyncReport) -> list[str]:
        """Save the facts asked for (a segment's `extract_requests`); the ids of those
        newly stored."""
        stored: list[str] = []
        for request in requests:
            requested = RequestedMemory(
                source=session.source, session_id=session.id,
                session_external_id=session.external_id, project=session.project,
                message_index=request.message.index, content=request.text,
                message_uuid=request.message.uuid, said_at=request.message.timestamp,
                private_to=self.policy.private_to(session.source),
            )
            result = await retrying(self.policy, self._backend.save_requested_memory, requested)
            if result.created:
                stored.append(result.id)
                report.requests_saved += 1
                log.info("requested_memory_saved", session_id=session.id,
                         message_index=request.message.index, memory_id=result.id)
        return stored

    async def _sync_summaries(self, session_id: int | None, report: SyncReport) -> None:
        for summary in await store.unsynced_summaries(self._conn, session_id):
            if self._stopping():
                return
            session = await store.get_sync_state(self._conn, summary.session_id)
            if session is None:
                continue
            if await summary_forgotten(self._conn, summary.content):
                # A forgotten session's summary, read again from a copy of its transcript.
                await store.mark_summary_synced(self._conn, summary.id, self._clock.now())
                continue
            try:
                await self._backend.save_session_summary(SessionSummary(
                    source=session.source, session_id=session.id,
                    session_external_id=session.external_id, project=session.project,
                    kind=summary.kind, content=redact(summary.content),
                    started_at=summary.started_at, ended_at=summary.ended_at,
                    private_to=self.policy.private_to(session.source),
                ))
            except BackendError as exc:
                log.warning("summary_sync_failed", session_id=session.id, error=str(exc))
                return
            await store.mark_summary_synced(self._conn, summary.id, self._clock.now())
            report.summaries_saved += 1

    async def _sync_digests(self, report: SyncReport, session_ids: list[int] | None) -> None:
        """Each session whose saved messages moved on (of `session_ids`, or any) gets its
        digest built again from them; a new version supersedes the last (history kept),
        an unchanged one is the same id, stored once. Built from what memory holds
        (`memory_sync_index`), so a digest never names a message that memory does not."""
        after = 0
        # Parents whose subagents did more than their digest says: built again after.
        woken: set[int] = set()
        while True:
            page = await store.digests_due(self._conn, session_ids, after=after,
                                           limit=DIGESTS_IN_HAND)
            for due in page:
                if self._stopping() or not await self._sync_digest(due, report, woken):
                    return
            if len(page) < DIGESTS_IN_HAND:
                break
            after = page[-1].state.id
        done: set[int] = set()  # a link cycle, if one were stored, is built once
        while woken - done:
            parent = min(woken - done)
            done.add(parent)
            for due in await store.digests_due(self._conn, [parent]):
                if self._stopping() or not await self._sync_digest(due, report, woken):
                    return

    async def _sync_digest(self, due: store.DigestDue, report: SyncReport,
                           woken: set[int]) -> bool:
        """Save one session's digest; False when the backend failed (the rest wait). A
        subagent's session whose parent is stored has none of its own: its work is its
        parent's (`woken`, whose digest is built again); one whose parent never came is
        digested as a session."""
        session = due.state
        end = session.memory_sync_index
        if due.parent_id is not None:
            # Its work is its parent's (a compaction agent's is nobody's): the parent's
            # digest is built again unless it took this subagent as far already.
            if not self.policy.passes_over(session) and self._absorbed.get(session.id) != end:
                await store.digest_again(self._conn, due.parent_id)
                woken.add(due.parent_id)
            await store.mark_digested(self._conn, session.id, end)
            return True
        digest = await self._digest_of(due)
        if digest is not None and digest.first_index is not None and digest.says_something:
            try:
                result = await retrying(self.policy, self._backend.save_session_summary,
                                        SessionSummary(
                    source=session.source, session_id=session.id,
                    session_external_id=session.external_id, project=session.project,
                    kind=DIGEST_KIND, content=redact(digest.render()),
                    first_index=digest.first_index, last_index=digest.last_index,
                    message_uuids=(), started_at=digest.started_at,
                    ended_at=digest.ended_at,
                    private_to=self.policy.private_to(session.source)))
            except BackendError as exc:
                log.warning("digest_sync_failed", session_id=session.id, error=str(exc))
                return False
            if result.created:
                report.digests_saved += 1
        await store.mark_digested(self._conn, session.id, end)
        return True

    async def _digest_of(self, due: store.DigestDue) -> Digest | None:
        """The digest of a session's messages saved to memory: the one this pass built
        while saving them, when it saved them all, else built from the store."""
        session = due.state
        end = session.memory_sync_index
        if self.policy.passes_over(session):
            return None
        built = self._built.pop(session.id, None)
        if built is not None and built.end == end:
            digest = built.digest
        else:
            messages = [m for m in await store.digest_messages(
                self._conn, session.id, end, copies=new_copies()) if not m.is_copy]
            if not messages:
                return None
            digest = _digest_builder(session).build(messages)
        for sub in await store.subagent_states(self._conn, session.id):
            if self.policy.passes_over(sub) or sub.memory_sync_index == 0:
                continue
            self._absorbed[sub.id] = sub.memory_sync_index
            # Built while this pass saved it, if it did (a subagent has no digest of its
            # own to take it), else read from the store.
            held = self._built.get(sub.id)
            if held is not None and held.end == sub.memory_sync_index:
                digest.absorb(held.digest)
                continue
            messages = [m for m in await store.digest_messages(
                self._conn, sub.id, sub.memory_sync_index, copies=new_copies())
                if not m.is_copy]
            digest.absorb(_digest_builder(sub).build(messages))
        digest.place(branch=due.git_branch, title=due.title)
        return digest

    def _waits(self, session: SessionSyncState, *, force: bool) -> bool:
        """Whether this pass passes `session` over: its backend failed lately (a forced
        pass tries it all the same)."""
        return not force and self._backing_off(session.id)

    def _backing_off(self, session_id: int) -> bool:
        entry = self._backoff.get(session_id)
        return entry is not None and self._clock.monotonic() < entry[0]

    def _back_off(self, session_id: int) -> float:
        _, previous = self._backoff.get(session_id, (0.0, BACKOFF_MIN / 2))
        delay = min(previous * 2, BACKOFF_MAX)
        self._backoff[session_id] = (self._clock.monotonic() + delay, delay)
        return delay

