"""Older sessions, distilled only when asked (`memoryd distill --since 30d`).

The messages already saved to memory (below each session's `memory_sync_index`) of the
sessions active since then, in projects the settings admit, are cut into segments as
recovery cuts them and queued like new ones; what they would cost is counted first
(`--dry-run`). A segment holding a message queued before is not queued again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import aiosqlite

from memoryd.config import Settings
from memoryd.distill.prompt import SYSTEM, build_prompt
from memoryd.distill.providers import MAX_ANSWER_TOKENS, estimate_tokens
from memoryd.lifecycle.segments import new_copies, plan_segments
from memoryd.memory import segment_id
from memoryd.store import distill_queue as queue
from memoryd.store import sessions as store
from memoryd.store.sessions import SessionSyncState, StoredMessage

#: Messages read a page at a time (a segment may be cut at a page's end).
PAGE = 2000


@dataclass(slots=True)
class Backlog:
    sessions: int = 0
    segments: int = 0
    messages: int = 0
    #: Tokens the calls would cost at most: the prompts as estimated, answers at most.
    tokens: int = 0
    entries: dict[int, list[queue.Queued]] = field(default_factory=dict)


async def plan_backlog(conn: aiosqlite.Connection, settings: Settings,
                       since: datetime) -> Backlog:
    """The segments of sessions active since `since` that a model would be sent."""
    backlog = Backlog()
    queued = await queue.queued_ranges(conn)
    for session in await store.sessions_active_since(conn, since):
        if not settings.distills(session.project) or session.memory_sync_index == 0:
            continue
        before = queued.get(session.id, [])
        entries: list[queue.Queued] = []
        index = 0
        copies = new_copies()  # passed over, as recovery's segments pass them over
        while index < session.memory_sync_index:
            messages = [m for m in await store.messages_from(conn, session.id, index, PAGE,
                                                             copies=copies)
                        if m.index < session.memory_sync_index]
            if not messages:
                break
            index = messages[-1].index + 1
            # Messages a model was sent already are left out (recovery's cuts differ from
            # a fresh plan's where it saved a tail early): the rest is cut run by run.
            for run in _unsent_runs(messages, before):
                entries += _plan_run(run, session, settings, backlog)
        if entries:
            backlog.sessions += 1
            backlog.segments += len(entries)
            backlog.entries[session.id] = entries
    return backlog


def _unsent_runs(messages: list[StoredMessage],
                 sent: list[tuple[int, int]]) -> list[list[StoredMessage]]:
    """The runs of consecutive `messages` that no range in `sent` covers."""
    runs: list[list[StoredMessage]] = [[]]
    for message in messages:
        if any(first <= message.index <= last for first, last in sent):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(message)
    return [run for run in runs if run]


def _plan_run(run: list[StoredMessage], session: SessionSyncState, settings: Settings,
              backlog: Backlog) -> list[queue.Queued]:
    roots = (session.worktree, session.project)
    entries = []
    for plan in plan_segments(run, max_chars=settings.segment_max_chars,
                              idle_gap=timedelta(seconds=settings.segment_idle_gap),
                              project=roots):
        prompt = build_prompt(plan.messages, plan.first_index, plan.last_index,
                              settings.extra_masks(), roots)
        if not prompt.lines:
            continue
        sid = segment_id(source=session.source, session_external_id=session.external_id,
                         session_id=session.id, first_index=plan.first_index,
                         last_index=plan.last_index)
        entries.append(queue.Queued(sid, plan.first_index, plan.last_index))
        backlog.messages += sum(not m.passed_over for m in plan.messages)
        backlog.tokens += (estimate_tokens(SYSTEM) + estimate_tokens(prompt.user)
                           + MAX_ANSWER_TOKENS)
    return entries
