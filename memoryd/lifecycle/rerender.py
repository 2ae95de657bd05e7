"""Memories already stored, rendered again as memory text is now written (issue 31.2).

Conversation segments saved by earlier versions hold tool inputs' JSON and tool output;
today a segment names each call in one line and a result only when it failed. This
upgrade reads each live segment's messages back from the store (the raw records stay
untouched in `session_messages`) and replaces the segment's text in place: same id,
same provenance, new chunks. It runs a few sessions a step (`upgrades` keeps the
position), so a kill repeats at most one step, and rendering the same messages again
gives the same text, so a repeated step changes nothing: every memory is either old
or new, never half of each, and never lost.

A segment whose messages are not all there any more (their text expired by
`retention.raw_messages` or cleared by a forget) keeps its old text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.lifecycle.segments import new_copies, render_range
from memoryd.memory import MemoryBackend, MemoryType
from memoryd.memory.protocol import ContentRewrite, MemoryBrowse
from memoryd.store import sessions as store
from memoryd.store import upgrades
from memoryd.store.raw import EXPIRED_KIND

log = structlog.get_logger("memoryd.rerender")

NAME = "memory_text_2"
#: Sessions a step: a few hundred segments at most, well under a second of work.
SESSIONS_A_STEP = 20


@dataclass(slots=True)
class Step:
    sessions: int = 0
    rewritten: int = 0
    done: bool = False


async def skip_if_fresh(conn: aiosqlite.Connection, now: datetime) -> None:
    """A store without sessions has nothing an older version wrote: the upgrade is done
    before it starts (otherwise it would render every session a fresh install's first
    backfill saves again, a few a step, for hours on a big history)."""
    if (await upgrades.progress(conn, NAME)).started:
        return
    if not await upgrades.sessions_after(conn, 0, 1):
        await upgrades.advance(conn, NAME, 0, 0, now, done=True)


async def rerender_step(conn: aiosqlite.Connection, backend: MemoryBackend, clock: Clock,
                        *, sessions: int = SESSIONS_A_STEP) -> Step:
    """Render the next `sessions` sessions' segments again; `done` once all were."""
    step = Step()
    if not isinstance(backend, ContentRewrite) or not isinstance(backend, MemoryBrowse):
        return Step(done=True)  # the backend keeps its text as it is (JSONL, the gateway)
    progress = await upgrades.progress(conn, NAME)
    if progress.done:
        return Step(done=True)
    if not progress.started:
        log.info("memory_text_rerender_started")
    batch = await upgrades.sessions_after(conn, progress.position, sessions)
    for session_id, project, worktree in batch:
        step.rewritten += await _session(conn, backend, session_id, (worktree, project))
        step.sessions += 1
    step.done = len(batch) < sessions
    position = batch[-1][0] if batch else progress.position
    await upgrades.advance(conn, NAME, position, step.rewritten, clock.now(), done=step.done)
    if step.done:
        total = (await upgrades.progress(conn, NAME)).changed
        log.info("memory_text_rerendered", memories=total)
    return step


async def _session(conn: aiosqlite.Connection, backend: MemoryBackend, session_id: int,
                   roots: tuple[str | None, str | None]) -> int:
    assert isinstance(backend, MemoryBrowse) and isinstance(backend, ContentRewrite)
    rewritten = 0
    # Read in order, one segment after the other, so that copies are told as recovery
    # tells them without reading the session's past again for each segment.
    copies = new_copies()
    for memory in sorted(await backend.session_memories(session_id),
                         key=lambda m: m.provenance.first_index or 0):
        p = memory.provenance
        if (memory.type is not MemoryType.CONVERSATION or not memory.is_live
                or p.first_index is None or p.last_index is None):
            continue
        wanted = p.last_index - p.first_index + 1
        messages = await store.messages_from(conn, session_id, p.first_index, wanted,
                                             copies=copies)
        if len(messages) != wanted or any(m.kind == EXPIRED_KIND for m in messages):
            continue
        text = render_range(messages, roots)
        if text and await backend.rewrite_content(memory.id, text):
            rewritten += 1
    return rewritten
