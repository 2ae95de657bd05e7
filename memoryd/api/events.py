"""Sessions and the agents' session events: search, list, sync, and the hooks' work.

`session_event`, by event:

- `start`: follow the agent's transcript at once (when `discovery.admit_transcript`
  lets it be read), then give a
  `<memory_context>` block for the session's project: explicit facts and
  corrections first, then what recent sessions in the project were about, then
  the project's weightiest memories; at most `agents.start_context_chars`.
- `prompt`: recall for the prompt and give only memories whose relevance reaches
  `agents.prompt_min_relevance` and that this agent session was not given
  before, within `agents.prompt_budget_tokens`; nothing when nothing qualifies.
- `pre_compact`: read the transcript to its end and save the session's unsynced
  messages to memory now, before the agent drops them from its context.
- `end`: mark the session `ended` and sync it now. `stop`: a sync, debounced.

Every block given is recorded in `injections` (never its text).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Mapping
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import structlog

from memoryd.api import args as arg
from memoryd.api.shared import MAX_LIMIT, OpsBase
from memoryd.briefing import project_state, render
from memoryd.config import DEFAULT_ROOTS, SourceKind
from memoryd.errors import ApiError, MemorydError
from memoryd.ingest.discovery import NOT_THERE_YET, admit_transcript
from memoryd.lifecycle.expiry import shown_as_of
from memoryd.lifecycle.markup import without_injected
from memoryd.memory import MemoryType, RecallResult
from memoryd.memory.embeddings import LazyLocalEmbedder
from memoryd.memory.policy import injectable
from memoryd.memory.privacy.redaction import readable_stored, sessions_shown, shown
from memoryd.memory.protocol import vector_queue
from memoryd.memory.recall.context import build_context
from memoryd.memory.recall.gate import content_words
from memoryd.memory.recall.spoken_time import passes_gate, spoken_time
from memoryd.names import AGENT_HOME_ENV, AGENTS, EVENTS
from memoryd.repository import project_root
from memoryd.store import links, queries
from memoryd.store.injections import Injection, injected_memory_ids, sessions_with_given
from memoryd.store.sessions import digest_reach, mark_ended

log = structlog.get_logger("memoryd.api")

#: A prompt longer than this is recalled on its first part (a pasted log is not a query).
PROMPT_QUERY_CHARS = 2000
#: A given digest's session's conversation that the digest already mentions this share
#: of (its content words) tells nothing new.
ALREADY_SAID = 0.8
#: How much of recent history the session-start block looks back on.
RECENT_DAYS = 30
RECENT_ITEMS = 4
#: Digests of the project's latest sessions a session-start block looks at (near-duplicates
#: are dropped and the budget decides how many fit).
START_DIGESTS = 40
#: Observations a model distilled of the project a briefing looks at (the latest).
START_NOTED = 20
#: At a session's start, sessions of its project not yet saved are saved first: at most
#: this many, each with at most so many unsaved messages (the hook has seconds).
START_SYNC_SESSIONS, START_SYNC_MESSAGES = 4, 400
#: Seconds a session's start waits at most for a pass over the transcripts, and spends at
#: most on it and on saving other sessions (a save begun is finished; no other is begun
#: after): the agent's first request waits for the hook.
START_CATCH_UP, START_SAVE_BUDGET = 0.5, 0.8
#: Memories given earlier in an agent session looked at to find the digests among them.
MAX_GIVEN_LOOKUPS = 200


def _said_share(text: str, said: str) -> float:
    """The share of `text`'s content words that `said` holds already."""
    words = content_words(text)
    if not words:
        return 1.0
    known = set(content_words(said))
    return sum(word in known for word in words) / len(words)


def _session_of(result: RecallResult) -> tuple[str | None, int | str | None]:
    p = result.provenance
    return (p.source, p.session_id if p.session_id is not None else p.session_external_id)
#: search_sessions: each message is masked on its first SEARCH_READ_CHARS and answered with
#: SEARCH_ANSWER_CHARS; at most SEARCH_PAGES pages of candidates are read for one answer.
SEARCH_READ_CHARS, SEARCH_ANSWER_CHARS, SEARCH_PAGES = 64_000, 4000, 8
#: Refused transcript paths remembered, so each is logged once (bounded: a client may send
#: any number of paths).
REFUSALS_REMEMBERED = 1000


class SessionEvents(OpsBase):
    """The stored sessions, and what a hook asks at each event of an agent's session."""

    async def search_sessions(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = arg.text(args, "query")
        words = [w for w in query.split() if w][:12]
        now = self.clock.now()
        since, until = arg.when(args, "since", now), arg.when(args, "until", now)
        # As recall: a request without an agent sees shared sessions only; a private
        # agent's sessions are its own.
        caller = arg.agent(args)
        hidden = [a for a in self.settings.memory.private_agents if a != caller]
        limit = arg.integer(args, "limit", 20, 1, MAX_LIMIT)
        # What an agent reads is what memory would hold (`show --view model`): secrets,
        # personal data, extra patterns and `<private>` spans masked, and the words are
        # matched against that masked text, so no search can spell out what it hides.
        # Masked whole (up to SEARCH_READ_CHARS), then clipped: a secret is never cut in
        # half before its rule sees it.
        masks = self.settings.extra_masks()
        lowered = [w.lower() for w in words]
        found: list[dict[str, Any]] = []
        page, offset = max(2 * limit, 50), 0
        for _ in range(SEARCH_PAGES):
            rows = await queries.search_messages(
                self._conn, words, project=arg.project(args),
                since=arg.iso(since) if since else None, until=arg.iso(until) if until else None,
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

    async def list_sessions(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """`memoryd sessions`: every session, newest first, with the blocks it was given."""
        return {"sessions": sessions_shown(await sessions_with_given(
            self._conn, status=arg.opt_text(args, "status"), source=arg.opt_text(args, "source"),
            stale_before=shown_as_of(self.clock.now(), self.settings.stale_session_timeout),
            flat=arg.flag(args, "all")), self.settings.extra_masks())}

    async def sync(self, args: Mapping[str, Any]) -> dict[str, Any]:
        session = arg.opt_text(args, "session")
        session_id = None
        if session is not None:
            found = await queries.find_session(self._conn, session)
            if found is None:
                raise ApiError(404, f"no session {session!r}")
            session_id = int(found["id"])
        return {"report": asdict(await self._runtime.sync(session_id))}

    async def open_ui(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"url": await self._runtime.open_ui()}

    async def session_event(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """A hook's event; returns `context` (a block, or None) and the memory ids in it.
        A block ready after `answer_by` (a time), `answer_within` seconds from now, or once
        `still_waiting()` is false, is not given: the hook has stopped waiting."""
        answer_by = arg.when(args, "answer_by", self.clock.now())
        within = args.get("answer_within")
        if answer_by is None and isinstance(within, int | float) and not isinstance(
                within, bool):
            answer_by = self.clock.now() + timedelta(seconds=min(600.0, max(0.0, float(within))))
        agent = arg.text(args, "agent")
        event = arg.text(args, "event")
        if agent not in AGENTS:
            raise ApiError(400, f"agent must be one of {', '.join(AGENTS)}")
        if event not in EVENTS:
            raise ApiError(400, f"event must be one of {', '.join(EVENTS)}")
        agent_session = arg.opt_text(args, "session_id")
        transcript = arg.opt_text(args, "transcript_path")
        cwd = arg.opt_text(args, "cwd")
        project = await links.resolve(self._conn, project_root(cwd) if cwd else None)
        kind = SourceKind(agent)
        if (event == "pre_compact" and agent == "gemini"
                and arg.opt_text(args, "trigger") != "manual"):
            # Gemini (0.61) fires PreCompress at every turn, before it looks whether the
            # history needs compressing at all (its ChatCompressionService), and its chat
            # file keeps every message through a compression: a turn's save waits as a
            # Stop's does, and a later turn moves it. `/compress` (manual) saves now.
            event = "stop"
        admitted = transcript is not None and self._admitted(transcript, kind, args)
        if admitted and transcript is not None:
            await self._best_effort(self._runtime.follow(
                transcript, kind, read_to_end=event in ("pre_compact", "end")), "follow")
        if event in ("pre_compact", "end", "stop"):
            await self._session_ended_or_synced(event, transcript, agent_session,
                                                read_first=admitted)
            return {"context": None, "memory_ids": []}
        if not self.settings.agents.inject:
            return {"context": None, "memory_ids": []}
        if event == "start":
            # The session's first prompt will ask recall: a model released while idle
            # loads now, behind this hook (never in front of the prompt's).
            embedder = getattr(vector_queue(self._backend), "embedder", None)
            if isinstance(embedder, LazyLocalEmbedder):
                embedder.prepare()
            await self._best_effort(self._save_quiet_sessions(project, agent_session),
                                    "save_quiet_sessions")
            # A resume (or an agent that does not say why it starts) holds the earlier
            # block: only what is new. A start, a compaction or a /clear holds none of it:
            # all of it (asked twice, the same block).
            resumed = arg.opt_text(args, "source") in ("resume", None)
            block_text, ids = await self._start_context(
                project, agent, agent_session if resumed else None)
        else:
            block_text, ids = await self._prompt_context(
                arg.text(args, "prompt", default=""), project, agent_session, agent)
        waiting = args.get("still_waiting")  # set by the API's hook route, never JSON
        late = answer_by is not None and self.clock.now() > answer_by
        gone = callable(waiting) and not waiting()
        if block_text is not None and (late or gone):
            # The hook has given up waiting: nothing was given, so nothing is recorded.
            log.info("block_too_late", agent=agent, hook_event=event, client_gone=gone,
                     late_by=round((self.clock.now() - answer_by).total_seconds(), 3)
                     if late and answer_by is not None else None)
            return {"context": None, "memory_ids": []}
        if block_text is not None:
            await self._record(Injection(agent=agent, agent_session_id=agent_session,
                                         interface="hook", event=event, project=project,
                                         memory_ids=tuple(ids), chars=len(block_text)))
        return {"context": block_text, "memory_ids": ids}

    async def briefing(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """What a new session of `agent` in the project of `cwd` would be told at its start
        (the project briefing), without saving anything first or recording it as given."""
        agent = arg.opt_text(args, "agent") or "claude"
        if agent not in AGENTS:
            raise ApiError(400, f"agent must be one of {', '.join(AGENTS)}")
        cwd = arg.opt_text(args, "cwd")
        project = await links.resolve(self._conn, project_root(cwd) if cwd else None)
        text, ids = await self._start_context(project, agent)
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

    def _admitted(self, transcript: str, kind: SourceKind, args: Mapping[str, Any]) -> bool:
        """Whether a transcript a hook named may be read (`discovery.admit_transcript`):
        inside a configured root of its agent, the agent's default directory or the one
        the hook found in the agent's environment (`transcript_root`). A refusal is
        logged once per path."""
        roots = [str(s.root) for s in self.settings.enabled_sources() if s.kind == kind]
        roots.append(os.path.expanduser(DEFAULT_ROOTS[kind]))
        told = arg.opt_text(args, "transcript_root")
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
        session = await self._find_agent_session(transcript, agent_session)
        if session is None and event == "stop" and transcript is not None and read_first:
            # A transcript the daemon learnt of from this hook (a new session's, or one
            # outside the watched roots) is not read yet: the turn's save needs its
            # session, so it is read now. The hook may stop waiting meanwhile; the
            # request is finished all the same.
            await self._runtime.catch_up(max(self.settings.agents.hook_timeout, 5.0))
            session = await self._find_agent_session(transcript, agent_session)
        if session is None:
            log.info("hook_session_unknown", hook_event=event, agent_session_id=agent_session)
            return
        session_id = int(session["id"])
        if event == "stop":
            # After an agent's turn: the person may have asked the next question already.
            self._runtime.sync_later(session_id, self.settings.agents.stop_sync_delay,
                                     settle_questions=True)
            return
        if event == "end":
            async with self._writing:
                await mark_ended(self._conn, session_id)
        await self._runtime.sync(session_id)

    async def _find_agent_session(self, transcript: str | None,
                                  agent_session: str | None) -> dict[str, Any] | None:
        if transcript is not None:
            found = await queries.session_by_transcript(self._conn, transcript)
            if found is not None:
                return found
        if agent_session:
            return await queries.find_session(self._conn, agent_session)
        return None

    async def _start_context(self, project: str | None, agent: str,
                             agent_session: str | None = None) -> tuple[str | None, list[str]]:
        """The project briefing (`memoryd.briefing`): the state the project's sessions left,
        from their digests; what people stated (the project's and every project's), what
        a model noted, and raw conversation only of sessions without a digest. Nothing of
        a session outside the project, nor of one in no project. A session resumed or
        continued (`claude --resume`, `codex exec resume`) was given a block already: it is
        told only what is new since (`agent_session`)."""
        scope: dict[str, Any] = {"agent": agent, **({"project": project} if project else {})}
        given = await injected_memory_ids(self._conn, agent_session) if agent_session else set()

        def new(results: list[RecallResult]) -> list[RecallResult]:
            # Nor what the resumed session itself said: its own digest is its own history.
            return [r for r in results if r.memory_id not in given
                    and (agent_session is None
                         or r.provenance.session_external_id != agent_session)]

        explicit = new([r for r in await self._recall(
            "", scope, limit=40,
            types=[MemoryType.FACT, MemoryType.CORRECTION, MemoryType.PROJECT_CONTEXT])
            if injectable(r, project)])
        digests: list[RecallResult] = []
        noted: list[RecallResult] = []
        other: list[RecallResult] = []
        if project:
            # The project's own: a project's recall also holds memories of no project, and
            # those of a session with no project (a chat in no folder) are not this one's
            # history; what a person stated for every project comes with `explicit`.
            found = await self._recall("", scope, limit=START_DIGESTS,
                                       types=[MemoryType.SESSION_DIGEST], order="recent")
            all_digests = [r for r in found if r.project == project]
            digested = {_session_of(r) for r in all_digests}
            digests = new(all_digests)
            noted = new([r for r in await self._recall(
                "", scope, limit=START_NOTED, types=[MemoryType.OBSERVATION], order="recent")
                if r.project == project and injectable(r, project)])
            recent_scope = {**scope,
                            "since": arg.iso(self.clock.now() - timedelta(days=RECENT_DAYS))}
            for kinds in ([MemoryType.SESSION_SUMMARY], [MemoryType.CONVERSATION]):
                found = await self._recall("", recent_scope, limit=MAX_LIMIT, types=kinds,
                                           order="recent")
                other += new(await self._undigested(
                    [r for r in found if r.project == project
                     and _session_of(r) not in digested]))[:RECENT_ITEMS]
        briefing = render(project_state(digests), project=project, explicit=explicit,
                          noted=noted, other=other,
                          limit=self.settings.agents.start_context_chars)
        if briefing is None:
            return None, []
        return briefing.text, list(briefing.memory_ids)

    async def _undigested(self, results: list[RecallResult]) -> list[RecallResult]:
        """`results` but the conversations their session's digest was built over, before
        the caller takes its share of them.

        The digest of a session older than the newest START_DIGESTS is not in the block,
        yet its conversation is not "a session without a digest"; one that said nothing
        (a lone tool call, a subagent's bare prompt) was not saved, and its raw line
        ("assistant used ...") says no more than it did."""
        reach = await digest_reach(self._conn, [
            r.provenance.session_id for r in results
            if r.type is MemoryType.CONVERSATION and r.provenance.session_id is not None])

        def covered(result: RecallResult) -> bool:
            p = result.provenance
            found = reach.get(p.session_id) if p.session_id is not None else None
            # The same session here (a chained store may hold another machine's memories).
            return (result.type is MemoryType.CONVERSATION and found is not None
                    and found[:2] == (p.source, p.session_external_id)
                    and p.last_index is not None and found[2] > p.last_index)

        return [r for r in results if not covered(r)]

    async def _prompt_context(self, prompt: str, project: str | None,
                              agent_session: str | None,
                              agent: str) -> tuple[str | None, list[str]]:
        # Gemini's BeforeAgent prompt starts with the hook context it was given: the
        # question is what the person typed, not memoryd's own block.
        query = without_injected(prompt).strip()[:PROMPT_QUERY_CHARS]
        if not query:
            return None, []
        scope: dict[str, Any] = {"agent": agent, **({"project": project} if project else {})}
        results = await self._recall(query, scope, limit=20)
        floor = self.settings.agents.prompt_min_relevance
        # A memory of the time the prompt speaks of answers for its time words, and a
        # prompt that is only a time is for memories of then (`recall/spoken_time.py`).
        spoken = spoken_time(query, self.clock.now())
        given = await injected_memory_ids(self._conn, agent_session) if agent_session else set()
        digested = await self._digested_sessions(given, results)
        # A session whose digest this agent session was given: its conversation is given
        # only for what the digest did not say (a decision stated mid-session, which a
        # digest of its ending leaves out), never to tell the same again.
        # Nor the session's own words (recalled for "go on", they are in its context).
        fresh = [r for r in results if r.memory_id not in given and injectable(r, project)
                 and (agent_session is None
                      or r.provenance.session_external_id != agent_session)
                 and not (r.type is MemoryType.CONVERSATION and _session_of(r) in digested
                          and _said_share(r.excerpt or r.content,
                                          digested[_session_of(r)]) >= ALREADY_SAID)
                 and passes_gate(r, query, spoken, floor)]
        if not fresh:
            return None, []
        block = build_context(fresh, budget=self.settings.agents.prompt_budget_tokens)
        if not block.items:
            return None, []
        return block.text, [item.result.memory_id for item in block.items]


    async def _save_quiet_sessions(self, project: str | None,
                                   agent_session: str | None) -> None:
        """A new session starts where others of its project stopped, perhaps killed a
        moment ago: what they said since their last save is saved now (a few sessions
        of few messages, so the hook stays quick), not a minute later, so the block
        holds it."""
        if project is None:
            return
        # A session killed a moment ago may not be read yet (the watch is fast, a pass
        # every `poll_interval` the floor): one pass now, cut short to leave the hook time.
        deadline = self.clock.monotonic() + START_SAVE_BUDGET
        await self._runtime.catch_up(START_CATCH_UP)
        for session_id in await queries.unsynced_sessions_of(
                self._conn, project, exclude=agent_session, limit=START_SYNC_SESSIONS,
                max_messages=START_SYNC_MESSAGES):
            if self.clock.monotonic() >= deadline:
                # The agent waits for this hook: the rest are saved behind it, now.
                self._runtime.sync_later(session_id, 0.0)
                continue
            await self._runtime.sync(session_id)
            deadline = self.clock.monotonic()  # one save in the hook (the latest session)

    async def _digested_sessions(
            self, given: set[str], results: list[RecallResult],
    ) -> dict[tuple[str | None, int | str | None], str]:
        """The sessions among `results`' whose digest is among the memories `given`, with
        what that digest says."""
        if not given:
            return {}
        sessions = {_session_of(r) for r in results if r.type is MemoryType.CONVERSATION}
        if not sessions:
            return {}
        found: dict[tuple[str | None, int | str | None], str] = {}
        for memory_id in sorted(given)[:MAX_GIVEN_LOOKUPS]:
            memory = await self._backend.get(memory_id)
            if memory is not None and memory.type is MemoryType.SESSION_DIGEST:
                p = memory.provenance
                key = (p.source, p.session_id if p.session_id is not None
                       else p.session_external_id)
                if key in sessions:
                    found[key] = memory.content
        return found


def _plausible_root(path: str, kind: SourceKind) -> bool:
    """Whether a transcript root a hook reports can be the agent's own: an absolute path
    ending in the agent's folder (`projects`, `sessions`, `.gemini/tmp`) below a home
    directory, never `/` or a system folder that would admit every file of the user's."""
    _variable, folder = AGENT_HOME_ENV[kind.value]
    clean = os.path.normpath(path)
    home = os.path.dirname(clean[: -len(folder)].rstrip(os.sep)) if clean.endswith(
        os.sep + folder) else ""
    return os.path.isabs(clean) and bool(home) and home != os.sep
