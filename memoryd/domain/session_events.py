"""Sessions and the agents' session events (`Sessions`): search, list, sync, and what a
hook asks at each event of an agent's session.

`event`, by event:

- `start`: follow the agent's transcript at once (when `discovery.admit_transcript`
  lets it be read), save what other sessions of the project left unsaved, then give the
  start block (`domain.blocks`).
- `prompt`: give the prompt block (`domain.blocks`).
- `pre_compact`: read the transcript to its end and save the session's unsynced
  messages to memory now, before the agent drops them from its context.
- `end`: mark the session `ended` and sync it now. `stop`: a sync, debounced.

Every block given is recorded in `injections` (never its text).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from dataclasses import asdict
from datetime import datetime
from typing import Any

import structlog

from memoryd.clock import utc_text
from memoryd.config import DEFAULT_ROOTS, SourceKind
from memoryd.domain.blocks import Block, Blocks
from memoryd.domain.core import Core
from memoryd.domain.requests import (
    BriefingRequest,
    ListSessionsRequest,
    SearchSessionsRequest,
    SessionEventRequest,
)
from memoryd.errors import BadRequest, MemorydError, NotFound
from memoryd.ingest.discovery import NOT_THERE_YET, admit_transcript
from memoryd.lifecycle.expiry import shown_as_of
from memoryd.memory.embeddings import LazyLocalEmbedder
from memoryd.memory.privacy.redaction import readable_stored, sessions_shown, shown
from memoryd.memory.protocol import vector_queue
from memoryd.names import AGENT_HOME_ENV, AGENTS, EVENTS
from memoryd.repository import project_root
from memoryd.store import queries
from memoryd.store.injections import Injection, sessions_with_given
from memoryd.store.sessions import mark_ended

log = structlog.get_logger("memoryd.domain")

#: At a session's start, sessions of its project not yet saved are saved first: at most
#: this many, each with at most so many unsaved messages (the hook has seconds).
START_SYNC_SESSIONS, START_SYNC_MESSAGES = 4, 400
#: Seconds a session's start waits at most for a pass over the transcripts, and spends at
#: most on it and on saving other sessions (a save begun is finished; no other is begun
#: after): the agent's first request waits for the hook.
START_CATCH_UP, START_SAVE_BUDGET = 0.5, 0.8
#: search: each message is masked on its first SEARCH_READ_CHARS and answered with
#: SEARCH_ANSWER_CHARS; at most SEARCH_PAGES pages of candidates are read for one answer.
SEARCH_READ_CHARS, SEARCH_ANSWER_CHARS, SEARCH_PAGES = 64_000, 4000, 8
#: Refused transcript paths remembered, so each is logged once (bounded: a client may send
#: any number of paths).
REFUSALS_REMEMBERED = 1000
#: The words of a search that count (the rest are ignored).
SEARCH_WORDS = 12


def _timestamp(moment: datetime | None) -> str | None:
    """A time as the store compares them (UTC, `+00:00`)."""
    return utc_text(moment, "auto", zulu=False) if moment is not None else None


class SessionEvents:
    """The stored sessions, and what a hook asks at each event of an agent's session."""

    def __init__(self, core: Core, blocks: Blocks) -> None:
        self._core = core
        self._blocks = blocks
        self._refused: set[str] = set()  # transcript paths refused (said once each)

    async def search(self, request: SearchSessionsRequest) -> dict[str, Any]:
        core = self._core
        words = [w for w in request.query.split() if w][:SEARCH_WORDS]
        # As recall: a request without an agent sees shared sessions only; a private
        # agent's sessions are its own.
        hidden = [a for a in core.settings.memory.private_agents if a != request.agent]
        limit = request.limit
        # What an agent reads is what memory would hold (`show --view model`): secrets,
        # personal data, extra patterns and `<private>` spans masked, and the words are
        # matched against that masked text, so no search can spell out what it hides.
        # Masked whole (up to SEARCH_READ_CHARS), then clipped: a secret is never cut in
        # half before its rule sees it.
        masks = core.settings.extra_masks()
        lowered = [w.lower() for w in words]
        found: list[dict[str, Any]] = []
        page, offset = max(2 * limit, 50), 0
        for _ in range(SEARCH_PAGES):
            rows = await queries.search_messages(
                core.conn, words, project=request.project,
                since=_timestamp(request.since), until=_timestamp(request.until),
                limit=page, offset=offset, hidden_sources=hidden,
                max_chars=SEARCH_READ_CHARS)
            for row in rows:
                text = shown(readable_stored(row["content"], row["kind"]), masks)
                if all(w in text.lower() for w in lowered):
                    found.append({**row, "content": text[:SEARCH_ANSWER_CHARS]})
            if len(found) >= limit or len(rows) < page:
                break
            offset += page
        return {"messages": found[:limit]}

    async def listing(self, request: ListSessionsRequest) -> dict[str, Any]:
        """`memoryd sessions`: every session, newest first, with the blocks it was given."""
        core = self._core
        return {"sessions": sessions_shown(await sessions_with_given(
            core.conn, status=request.status, source=request.source,
            stale_before=shown_as_of(core.clock.now(), core.settings.stale_session_timeout),
            flat=request.flat), core.settings.extra_masks())}

    async def sync(self, session: str | None) -> dict[str, Any]:
        session_id = None
        if session is not None:
            found = await queries.find_session(self._core.conn, session)
            if found is None:
                raise NotFound(f"no session {session!r}")
            session_id = int(found["id"])
        return {"report": asdict(await self._core.runtime.sync(session_id))}

    async def open_ui(self) -> dict[str, Any]:
        return {"url": await self._core.runtime.open_ui()}

    async def event(self, request: SessionEventRequest) -> dict[str, Any]:
        """A hook's event; returns `context` (a block, or None) and the memory ids in it.
        A block ready after `answer_by`, or once `still_waiting()` is false, is not given:
        the hook has stopped waiting."""
        core = self._core
        agent, event = request.agent, request.event
        if agent not in AGENTS:
            raise BadRequest(f"agent must be one of {', '.join(AGENTS)}")
        if event not in EVENTS:
            raise BadRequest(f"event must be one of {', '.join(EVENTS)}")
        agent_session, transcript = request.session_id, request.transcript_path
        project = await core.linked(project_root(request.cwd) if request.cwd else None)
        kind = SourceKind(agent)
        if event == "pre_compact" and agent == "gemini" and request.trigger != "manual":
            # Gemini (0.61) fires PreCompress at every turn, before it looks whether the
            # history needs compressing at all (its ChatCompressionService), and its chat
            # file keeps every message through a compression: a turn's save waits as a
            # Stop's does, and a later turn moves it. `/compress` (manual) saves now.
            event = "stop"
        admitted = transcript is not None and self._admitted(transcript, kind,
                                                             request.transcript_root)
        if admitted and transcript is not None:
            await self._best_effort(core.runtime.follow(
                transcript, kind, read_to_end=event in ("pre_compact", "end")), "follow")
        if event in ("pre_compact", "end", "stop"):
            await self._session_ended_or_synced(event, transcript, agent_session,
                                                read_first=admitted)
            return {"context": None, "memory_ids": []}
        if not core.settings.agents.inject:
            return {"context": None, "memory_ids": []}
        block: Block
        if event == "start":
            # The session's first prompt will ask recall: a model released while idle
            # loads now, behind this hook (never in front of the prompt's).
            embedder = getattr(vector_queue(core.backend), "embedder", None)
            if isinstance(embedder, LazyLocalEmbedder):
                embedder.prepare()
            await self._best_effort(self._save_quiet_sessions(project, agent_session),
                                    "save_quiet_sessions")
            # A resume (or an agent that does not say why it starts) holds the earlier
            # block: only what is new. A start, a compaction or a /clear holds none of it:
            # all of it (asked twice, the same block).
            resumed = request.source in ("resume", None)
            block = await self._blocks.start(project, agent,
                                             agent_session if resumed else None)
        else:
            block = await self._blocks.prompt(request.prompt, project, agent_session, agent)
        block_text, ids = block
        answer_by = request.answer_by
        late = answer_by is not None and core.clock.now() > answer_by
        gone = request.still_waiting is not None and not request.still_waiting()
        if block_text is not None and (late or gone):
            # The hook has given up waiting: nothing was given, so nothing is recorded.
            log.info("block_too_late", agent=agent, hook_event=event, client_gone=gone,
                     late_by=round((core.clock.now() - answer_by).total_seconds(), 3)
                     if late and answer_by is not None else None)
            return {"context": None, "memory_ids": []}
        if block_text is not None:
            await core.record(Injection(agent=agent, agent_session_id=agent_session,
                                        interface="hook", event=event, project=project,
                                        memory_ids=tuple(ids), chars=len(block_text)))
        return {"context": block_text, "memory_ids": ids}

    async def briefing(self, request: BriefingRequest) -> dict[str, Any]:
        """What a new session of `agent` in the project of `cwd` would be told at its start
        (the project briefing), without saving anything first or recording it as given."""
        if request.agent not in AGENTS:
            raise BadRequest(f"agent must be one of {', '.join(AGENTS)}")
        project = await self._core.linked(project_root(request.cwd) if request.cwd else None)
        text, ids = await self._blocks.start(project, request.agent)
        return {"text": text, "project": project, "memory_ids": ids,
                "chars": len(text or "")}

    async def _best_effort(self, work: Awaitable[Any], what: str) -> None:
        """Saving before a block is given: a full disk or a busy store must not cost the
        agent its block (reading still works); damage stops everything, as always."""
        try:
            await work
        except MemorydError as exc:
            if exc.damaged:
                raise
            log.warning("hook_save_skipped", step=what, error=str(exc))

    def _admitted(self, transcript: str, kind: SourceKind, told: str | None) -> bool:
        """Whether a transcript a hook named may be read (`discovery.admit_transcript`):
        inside a configured root of its agent, the agent's default directory or the one
        the hook found in the agent's environment (`told`). A refusal is logged once per
        path."""
        settings = self._core.settings
        roots = [str(s.root) for s in settings.enabled_sources() if s.kind == kind]
        roots.append(os.path.expanduser(DEFAULT_ROOTS[kind]))
        if told is not None and _plausible_root(told, kind):
            roots.append(told)
        refusal = admit_transcript(transcript, roots)
        if refusal is None:
            return True
        if transcript not in self._refused:
            if len(self._refused) < REFUSALS_REMEMBERED:
                self._refused.add(transcript)
            # A new session's transcript is written after its first hooks: not a refusal
            # worth a warning (the walk finds it once it is there).
            level = log.debug if refusal == NOT_THERE_YET else log.warning
            level("transcript_refused", agent=kind.value, path=transcript[:300],
                  reason=refusal)
        return False

    async def _session_ended_or_synced(self, event: str, transcript: str | None,
                                       agent_session: str | None, *,
                                       read_first: bool = False) -> None:
        core = self._core
        session = await self._find_agent_session(transcript, agent_session)
        if session is None and event == "stop" and transcript is not None and read_first:
            # A transcript the daemon learnt of from this hook (a new session's, or one
            # outside the watched roots) is not read yet: the turn's save needs its
            # session, so it is read now. The hook may stop waiting meanwhile; the
            # request is finished all the same.
            await core.runtime.catch_up(max(core.settings.agents.hook_timeout, 5.0))
            session = await self._find_agent_session(transcript, agent_session)
        if session is None:
            log.info("hook_session_unknown", hook_event=event, agent_session_id=agent_session)
            return
        session_id = int(session["id"])
        if event == "stop":
            # After an agent's turn: the person may have asked the next question already.
            core.runtime.sync_later(session_id, core.settings.agents.stop_sync_delay,
                                    settle_questions=True)
            return
        if event == "end":
            async with core.writing:
                await mark_ended(core.conn, session_id)
        await core.runtime.sync(session_id)

    async def _find_agent_session(self, transcript: str | None,
                                  agent_session: str | None) -> dict[str, Any] | None:
        if transcript is not None:
            found = await queries.session_by_transcript(self._core.conn, transcript)
            if found is not None:
                return found
        if agent_session:
            return await queries.find_session(self._core.conn, agent_session)
        return None

    async def _save_quiet_sessions(self, project: str | None,
                                   agent_session: str | None) -> None:
        """A new session starts where others of its project stopped, perhaps killed a
        moment ago: what they said since their last save is saved now (a few sessions
        of few messages, so the hook stays quick), not a minute later, so the block
        holds it."""
        if project is None:
            return
        core = self._core
        # A session killed a moment ago may not be read yet (the watch is fast, a pass
        # every `poll_interval` the floor): one pass now, cut short to leave the hook time.
        deadline = core.clock.monotonic() + START_SAVE_BUDGET
        await core.runtime.catch_up(START_CATCH_UP)
        for session_id in await queries.unsynced_sessions_of(
                core.conn, project, exclude=agent_session, limit=START_SYNC_SESSIONS,
                max_messages=START_SYNC_MESSAGES):
            if core.clock.monotonic() >= deadline:
                # The agent waits for this hook: the rest are saved behind it, now.
                core.runtime.sync_later(session_id, 0.0)
                continue
            await core.runtime.sync(session_id)
            deadline = core.clock.monotonic()  # one save in the hook (the latest session)


def _plausible_root(path: str, kind: SourceKind) -> bool:
    """Whether a transcript root a hook reports can be the agent's own: an absolute path
    ending in the agent's folder (`projects`, `sessions`, `.gemini/tmp`) below a home
    directory, never `/` or a system folder that would admit every file of the user's."""
    _variable, folder = AGENT_HOME_ENV[kind.value]
    clean = os.path.normpath(path)
    home = os.path.dirname(clean[: -len(folder)].rstrip(os.sep)) if clean.endswith(
        os.sep + folder) else ""
    return os.path.isabs(clean) and bool(home) and home != os.sep
