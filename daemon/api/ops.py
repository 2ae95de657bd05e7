"""Every operation the local API serves, over open stores.

The daemon serves these on its socket (`api.server`); when no daemon runs, the
same object is built over stores opened directly (`client.direct_ops`), so a hook, the
MCP server and the CLI behave the same either way. Arguments arrive as JSON
values and are checked here: a bad one raises `errors.ApiError` with status 400 and one
clear line. Results are plain JSON values.

Agent session events (`session_event`) are the hooks' work:

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

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any, Protocol

import aiosqlite
import structlog

from daemon.clock import Clock
from daemon.config import DEFAULT_ROOTS, Settings, SourceKind
from daemon.errors import ApiError, MemorydError
from daemon.ingest.discovery import admit_transcript
from daemon.lifecycle.recovery import SyncReport
from daemon.lifecycle.retention import Retention
from daemon.memory import (
    Capability,
    MemoryBackend,
    MemoryType,
    RecallOrder,
    RecallResult,
    memory_to_record,
)
from daemon.memory.context import DEFAULT_BUDGET, MIN_BUDGET, build_context
from daemon.memory.gate import content_words, coverage
from daemon.memory.models import Memory, visible_to
from daemon.memory.opening import memory_user, opener, owner_user
from daemon.memory.protocol import ProjectRelabel, Relabelled
from daemon.memory.records import result_to_record
from daemon.memory.redaction import mask_extra, redact
from daemon.memory.rerank import HttpReranker, RerankOptions, reorder
from daemon.names import AGENT_HOME_ENV, AGENTS, EVENTS, agent_name, project_path
from daemon.store import audit, forgotten, holds, links, queries, raw, transcripts
from daemon.store.injections import (
    Injection,
    injected_memory_ids,
    record_injection,
    sessions_with_given,
)
from daemon.store.sessions import mark_ended
from daemon.timephrases import WhenError, parse_when

log = structlog.get_logger("memoryd.api")

#: Recall this many candidates before fitting the best into a context budget.
CONTEXT_CANDIDATES = 60
#: A prompt longer than this is recalled on its first part (a pasted log is not a query).
PROMPT_QUERY_CHARS = 2000
MAX_LIMIT = 200
#: Correcting by query: the memory must cover this much of the query's words (gate.coverage).
CORRECT_MIN_COVERAGE = 0.5
#: How much of recent history the session-start block looks back on.
RECENT_DAYS = 30
RECENT_ITEMS = 4
#: search_sessions: each message is masked on its first SEARCH_READ_CHARS and answered with
#: SEARCH_ANSWER_CHARS; at most SEARCH_PAGES pages of candidates are read for one answer.
SEARCH_READ_CHARS, SEARCH_ANSWER_CHARS, SEARCH_PAGES = 64_000, 4000, 8
#: Refused transcript paths remembered, so each is logged once (bounded: a client may send
#: any number of paths).
REFUSALS_REMEMBERED = 1000


class Runtime(Protocol):
    """What only a process that ingests can do: the daemon, or a direct fallback."""

    async def follow(self, path: str, kind: SourceKind, *, read_to_end: bool) -> None:
        """Follow this transcript; with `read_to_end`, return once it is stored to its end."""
        ...

    async def sync(self, session_id: int | None) -> SyncReport:
        """Save the unsynced messages of one session (or all) to memory now."""
        ...

    def sync_later(self, session_id: int, delay: float) -> None:
        """Ask for a sync of this session after `delay` seconds (later asks replace it)."""
        ...

    async def open_ui(self) -> str:
        """Serve the web viewer (started on first use); the address that logs a browser in."""
        ...


class MemoryOps:
    """The operations, over the daemon's store connection and a memory backend."""

    def __init__(self, settings: Settings, clock: Clock, conn: aiosqlite.Connection,
                 backend: MemoryBackend, runtime: Runtime) -> None:
        self.settings = settings
        self.clock = clock
        self._conn = conn
        self._backend = backend
        self._runtime = runtime
        # One transaction at a time on the shared connection (concurrent requests).
        self._writing = asyncio.Lock()
        self._refused: set[str] = set()  # transcript paths refused (said once each)
        rerank = settings.memory.rerank
        self._reranker = None if rerank.provider == "none" else HttpReranker(RerankOptions(
            base_url=rerank.base_url, model=rerank.model, api_key_env=rerank.api_key_env,
            candidates=rerank.candidates, timeout=rerank.timeout))

    @property
    def store(self) -> aiosqlite.Connection:
        """The daemon's store connection (the viewer's read-only queries)."""
        return self._conn

    @property
    def memory(self) -> MemoryBackend:
        return self._backend

    # -- memory ----------------------------------------------------------------------

    async def recall(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = _text(args, "query", default="")
        results = await self._recall(query, args, limit=_int(args, "limit", 10, 1, MAX_LIMIT))
        if _bool(args, "record") and results:
            await self._record(Injection(
                agent=_opt_text(args, "agent") or "unknown",
                agent_session_id=_opt_text(args, "agent_session_id"),
                interface=_opt_text(args, "interface") or "api", event="recall",
                project=_project(args), memory_ids=tuple(r.memory_id for r in results),
                chars=sum(len(r.excerpt or r.content) for r in results)))
        return {"results": [result_to_record(r) for r in results]}

    async def _recall(self, query: str, args: Mapping[str, Any], *, limit: int,
                      types: Sequence[MemoryType] | None = None,
                      order: RecallOrder = "score") -> list[RecallResult]:
        now = self.clock.now()
        kinds = types if types is not None else _types(args)
        reranking = self._reranker is not None and order == "score" and bool(query.strip())
        wanted = max(limit, self.settings.memory.rerank.candidates) if reranking else limit
        results = await self._backend.recall(
            query, project=await self._linked(args), all_projects=_bool(args, "all_projects"),
            limit=wanted, since=_when(args, "since", now), until=_when(args, "until", now),
            types=kinds, order=order, agent=_agent(args))
        if reranking and self._reranker is not None and len(results) > 1:
            scores = await self._reranker.scores(
                query, [r.excerpt or r.content for r in results])
            if scores is not None:
                results = [results[i] for i in reorder(scores, len(results))]
        return results[:limit]

    async def _linked(self, args: Mapping[str, Any]) -> str | None:
        """The request's project, by its new path when it was linked to one."""
        return await links.resolve(self._conn, _project(args))

    @staticmethod
    def _visible(memory: Memory | None, args: Mapping[str, Any]) -> Memory | None:
        """`memory`, unless an agent asks and it is another agent's private memory (a
        person, asking without an agent, sees all of their own memories by id)."""
        if memory is None or "agent" not in args or visible_to(memory.private_to,
                                                               _agent(args)):
            return memory
        return None

    def _require(self, capability: Capability) -> None:
        if capability not in self._backend.capabilities:
            raise ApiError(501, f"the {self._backend.name} memory backend cannot"
                                f" {capability.value}")

    async def recall_temporal(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self._require(Capability.TEMPORAL)
        if args.get("since") is None:
            raise ApiError(400, "since is required (an ISO date, 'yesterday', 'last week')")
        results = await self._recall(_text(args, "query", default=""), args,
                                     limit=_int(args, "limit", 50, 1, MAX_LIMIT), order="time")
        return {"results": [result_to_record(r) for r in results]}

    async def context(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = _text(args, "query", default="")
        budget = _int(args, "budget", DEFAULT_BUDGET, MIN_BUDGET, 100_000)
        results = await self._recall(query, args, limit=CONTEXT_CANDIDATES)
        block = build_context(results, budget)
        ids = [item.result.memory_id for item in block.items]
        agent_session = _opt_text(args, "agent_session_id")
        if agent_session is not None or _bool(args, "record"):
            await self._record(Injection(
                agent=_opt_text(args, "agent") or "unknown", agent_session_id=agent_session,
                interface=_opt_text(args, "interface") or "api", event="memory_context",
                project=_project(args), memory_ids=tuple(ids), chars=len(block.text)))
        return {"text": block.text, "memory_ids": ids, "tokens": block.tokens,
                "budget": block.budget, "chars": len(block.text),
                "dropped_duplicates": block.dropped_duplicates,
                "dropped_for_budget": block.dropped_for_budget,
                "items": [{**result_to_record(i.result), "line": i.text, "tokens": i.tokens}
                          for i in block.items]}

    async def remember(self, args: Mapping[str, Any]) -> dict[str, Any]:
        content = _text(args, "content")
        kind = _opt_text(args, "type") or "fact"
        if kind not in ("fact", "project_context"):
            raise ApiError(400, "type must be fact or project_context")
        importance = args.get("importance")
        if importance is not None and (isinstance(importance, bool) or not isinstance(
                importance, int | float) or not 0.0 <= float(importance) <= 1.0):
            raise ApiError(400, "importance must be a number from 0 to 1")
        tags = args.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ApiError(400, "tags must be a list of strings")
        private_to = None
        if _bool(args, "private"):
            private_to = _agent(args)
            if private_to in (None, "unknown"):
                raise ApiError(400, "a private memory needs the agent it is private to"
                                    " (agent)")
        memory = await self._backend.remember(
            content, type=MemoryType(kind),
            importance=None if importance is None else float(importance),
            project=await self._linked(args), tags=tags, private_to=private_to)
        return {"memory": memory_to_record(memory)}

    async def correct(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self._require(Capability.CORRECT)
        content = _text(args, "content")
        target = _opt_text(args, "memory_id")
        query = _opt_text(args, "query")
        if (target is None) == (query is None):
            raise ApiError(400, "give memory_id or query, not both")
        if target is None:
            assert query is not None
            # Correcting by query replaces a memory the caller has not seen: only one that
            # clearly matches, never merely whatever ranks first.
            if not content_words(query):
                raise ApiError(400, f"the query {query[:80]!r} has no words to match;"
                                    " give words, or the memory's id")
            found = await self._backend.recall(query, limit=1, all_projects=True,
                                               agent=_agent(args))
            if not found or coverage(query, found[0].content) < CORRECT_MIN_COVERAGE:
                raise ApiError(404, f"no memory clearly matches {query[:80]!r}"
                                    " (see `memoryd recall`; correct by id)")
            target = found[0].memory_id
        old = self._visible(await self._backend.get(target), args)
        if old is None:
            raise ApiError(404, f"no memory {target}")
        if not old.is_live:
            raise ApiError(409, f"memory {target} is not live (superseded or forgotten)")
        memory = await self._backend.correct(target, content,
                                             reason=_opt_text(args, "reason"))
        return self._noting_copies({"memory": memory_to_record(memory), "replaced": target},
                                   Capability.CORRECT)

    async def forget(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self._require(Capability.FORGET)
        return self._noting_copies({"forgotten": await self._forget(args)}, Capability.FORGET)

    def _noting_copies(self, answer: dict[str, Any], capability: Capability) -> dict[str, Any]:
        """`answer`, plus the layers that cannot do `capability` and so keep their copy as it
        was (the Memory Gateway keeps what is forgotten or corrected elsewhere)."""
        cannot = getattr(self._backend, "cannot", None)
        remains = cannot(capability) if cannot is not None else []
        return {**answer, "remains_in": remains} if remains else answer

    async def _forget(self, args: Mapping[str, Any]) -> int:
        hard = _bool(args, "hard")
        memory_id = _opt_text(args, "memory_id")
        session = _opt_text(args, "session")
        project = _project(args)
        everything = _bool(args, "all")
        if sum(x is not None for x in (memory_id, session, project)) + everything != 1:
            raise ApiError(400, "give exactly one of memory_id, session, project, all")
        held = await holds.standing(self._conn)
        if everything:
            if held:
                raise ApiError(409, "legal holds stand (`memoryd hold list`): forgetting"
                                    " everything would delete what they keep")
            count = await self._backend.forget_where(all=True, hard=hard)
            await self._remember_forgotten(everything=True)
            return count
        if memory_id is not None:
            if self._visible(await self._backend.get(memory_id), args) is None:
                return 0
            for version in await self._backend.history(memory_id):
                _refuse_if_held(held, version.project, version.provenance.session_id,
                                version.provenance.session_external_id)
            return int(await self._backend.forget(memory_id, hard=hard))
        if project is not None:
            _refuse_if_held(held, project, None, None)
        if session is not None:
            found = await queries.find_session(self._conn, session)
            _refuse_if_held(held, found.get("project") if found else None,
                            int(found["id"]) if found else None,
                            found.get("external_id") if found else session)
            if found is None:
                count = await self._backend.forget_where(session_external_id=session, hard=hard)
                await self._remember_forgotten(agent_session=session)
                return count
            count = await self._backend.forget_where(session_id=int(found["id"]), hard=hard)
            if found.get("external_id"):
                # By the agent's own id too: it survives a re-ingest into a new store, so
                # the session's later segments are never saved again (forgetting sticks).
                count += await self._backend.forget_where(
                    session_external_id=found["external_id"], hard=hard)
            # The subagents it started are part of it (their transcripts are its own).
            children = await forgotten.subagent_sessions(self._conn, int(found["id"]))
            for child in children:
                count += await self._backend.forget_where(session_id=child, hard=hard)
            await self._remember_forgotten(session_ids=[int(found["id"]), *children],
                                           agent_session=found.get("external_id"))
            return count
        count = await self._backend.forget_where(project=project, hard=hard)
        await self._remember_forgotten(project=project)
        return count

    async def _remember_forgotten(self, *, session_ids: Sequence[int] = (),
                                  agent_session: str | None = None,
                                  project: str | None = None,
                                  everything: bool = False) -> None:
        """Forgetting keys on the content too (`store.forgotten`): a copy of the transcript
        under another name, read as a new session, never brings it back."""
        async with self._writing:
            keys = await forgotten.remember_forgotten(
                self._conn, self.clock.now(), session_ids=session_ids,
                agent_session=agent_session, project=project, everything=everything)
        log.info("content_forgotten", message_keys=keys, sessions=len(session_ids),
                 project=project is not None, everything=everything)

    # -- governance ------------------------------------------------------------------

    async def forget_user(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Everything about a user, deleted for good (the right to be forgotten): their
        memories in every layer (with vectors), saves still waiting in the outbox, and,
        when they are this daemon's user, the text of the raw archive. Counts only."""
        user = _text(args, "user")
        if await holds.standing(self._conn):
            raise ApiError(409, "legal holds stand (`memoryd hold list`): forgetting"
                                " everything would delete what they keep")
        report: dict[str, Any] = {"user": user, "forgotten": 0, "outbox_saves_dropped": 0,
                                  "archive": None}
        if user != owner_user(self.settings):
            # Only a shared PostgreSQL layer keeps other users' memories; the others hold
            # this daemon's user's alone.
            if "postgres" in self.settings.memory.backends:
                report["forgotten"] = await _forget_other_user(self.settings, self.clock, user)
            return report
        # The archive first: a sync running meanwhile then finds no text left to save.
        async with self._writing:
            report["archive"] = await raw.clear_everything(self._conn, self.clock.now())
        outbox = getattr(self._backend, "outbox", None)
        if outbox is not None:
            report["outbox_saves_dropped"] = await outbox.purge_saves()
        report["forgotten"] = await self._backend.forget_where(all=True, hard=True)
        return self._noting_copies(report, Capability.FORGET)

    async def retention(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Apply the retention settings now (`dry_run`: only say what would go)."""
        dry_run = args.get("dry_run")
        if dry_run is not None and not isinstance(dry_run, bool):
            raise ApiError(400, "dry_run must be true or false")
        job = Retention(self._conn, self._backend, self.clock, self.settings.retention)
        async with self._writing:  # recorded in the audit trail by `run`, like any operation
            report = await job.run(dry_run=dry_run, audit_as=None)
        return report.as_dict()

    async def transcripts(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The raw archive's lifecycle (`store/transcripts.py`) for the sessions chosen by
        `session`, `project` and/or `older_than` (seconds): `archive`, `mask` or
        `delete_raw`. Sessions under a legal hold are left as they are (and counted) by
        `mask` and `delete_raw`; memories derived from the sessions are listed, never
        deleted."""
        action = _text(args, "action")
        if action not in ("archive", "mask", "delete_raw"):
            raise ApiError(400, "action must be archive, mask or delete_raw")
        session, project = _opt_text(args, "session"), _project(args)
        older_than = args.get("older_than")
        if older_than is not None and (isinstance(older_than, bool) or not isinstance(
                older_than, int | float) or not 0 <= older_than <= 10 * 365 * 86400):
            raise ApiError(400, "older_than must be a number of seconds (up to ten years)")
        if session is None and project is None and older_than is None:
            raise ApiError(400, "choose sessions: a session, a project and/or an age")
        session_id = None
        if session is not None:
            found = await queries.find_session(self._conn, session)
            if found is None:
                raise ApiError(404, f"no session matches {session[:80]!r}")
            session_id = int(found["id"])
        before = (None if older_than is None
                  else self.clock.now() - timedelta(seconds=float(older_than)))
        chosen = await transcripts.select_sessions(self._conn, session_id=session_id,
                                                   project=project, before=before)
        held = await holds.standing(self._conn)
        report: dict[str, Any] = {"action": action, "sessions": len(chosen), "held": 0,
                                  "messages": 0, "not_in_memory_yet": 0, "files": []}
        if action != "archive":
            kept = [s for s in chosen if held.covers(
                project=s["project"], session_id=s["id"], session_external_id=s["external_id"])]
            report["held"] = len(kept)
            chosen = [s for s in chosen if s not in kept]
        ids = [int(s["id"]) for s in chosen]
        async with self._writing:
            if action == "archive":
                directory = self.settings.state_dir / "archive"
                for chosen_session in chosen:
                    path, lines = await transcripts.archive_session(
                        self._conn, chosen_session, directory)
                    report["files"].append(str(path))
                    report["messages"] += lines
            elif action == "mask":
                masks = self.settings.extra_masks()
                report["messages"] = await transcripts.mask_messages(
                    self._conn, ids, lambda text: mask_extra(redact(text), masks))
            else:
                report["messages"], report["not_in_memory_yet"] = (
                    await transcripts.clear_messages(self._conn, ids))
        report["memory_ids"] = await self._derived(ids)
        return report

    async def _derived(self, session_ids: list[int]) -> list[str]:
        """The memories saved from these sessions (listed for a person to decide)."""
        wanted = set(session_ids)
        if not wanted or Capability.EXPORT not in self._backend.capabilities:
            return []
        found = []
        async for record in self._backend.export():
            if (record.get("provenance") or {}).get("session_id") in wanted:
                found.append(record["id"])
        return found

    async def hold(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Place a legal hold on a project or a session: no deletion touches it."""
        project, session = _project(args), _opt_text(args, "session")
        if (project is None) == (session is None):
            raise ApiError(400, "give a project or a session to hold")
        session_id = None
        if session is not None:
            found = await queries.find_session(self._conn, session)
            if found is not None:
                session_id = int(found["id"])
                session = found.get("external_id") or session
        kind, value = ("project", project) if project is not None else ("session", session)
        assert value is not None
        async with self._writing:
            hold_id, created = await holds.place(
                self._conn, kind=kind, value=value, session_id=session_id,
                reason=_opt_text(args, "reason"), now=self.clock.now())
        return {"hold": hold_id, "kind": kind, "value": value, "created": created}

    async def list_holds(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"holds": await holds.listing(self._conn)}

    async def release_hold(self, args: Mapping[str, Any]) -> dict[str, Any]:
        hold_id = _int(args, "hold", 0, 1, 2**62)
        async with self._writing:
            released = await holds.release(self._conn, hold_id)
        if released is None:
            raise ApiError(404, f"no legal hold {hold_id} (see `memoryd hold list`)")
        return {"released": released}

    async def link_project(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Link a renamed folder's old path to its new one and move what memory holds."""
        old, new = project_path(_text(args, "old")), project_path(_text(args, "new"))
        try:
            async with self._writing:
                sessions = await links.link(self._conn, old, new, self.clock.now())
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        done = (await self._backend.relabel_project(old, new)
                if isinstance(self._backend, ProjectRelabel)
                else Relabelled(0, (self._backend.name,)))
        return {"old": old, "new": new, "sessions_moved": sessions,
                "memories_moved": done.moved,
                **({"unmoved_in": list(done.unmoved)} if done.unmoved else {})}

    async def project_links(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"links": [asdict(link) for link in await links.all_links(self._conn)]}

    async def unlink_project(self, args: Mapping[str, Any]) -> dict[str, Any]:
        old = project_path(_text(args, "old"))
        async with self._writing:
            removed = await links.unlink(self._conn, old)
        if not removed:
            raise ApiError(404, f"{old} is not linked (see `memoryd project links`)")
        return {"unlinked": old}

    async def get_memory(self, args: Mapping[str, Any]) -> dict[str, Any]:
        memory_id = _text(args, "memory_id")
        memory = self._visible(await self._backend.get(memory_id), args)
        if memory is None:
            raise ApiError(404, f"no memory {memory_id}")
        if _bool(args, "record_use", default=True):
            await self._backend.record_use([memory.id])
        history = await self._backend.history(memory_id)
        return {"memory": memory_to_record(memory),
                "history": [memory_to_record(m) for m in history]}

    # -- sessions --------------------------------------------------------------------

    async def search_sessions(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = _text(args, "query")
        words = [w for w in query.split() if w][:12]
        now = self.clock.now()
        since, until = _when(args, "since", now), _when(args, "until", now)
        hidden: list[str] = []
        if "agent" in args:
            caller = _agent(args)
            hidden = [a for a in self.settings.memory.private_agents if a != caller]
        limit = _int(args, "limit", 20, 1, MAX_LIMIT)
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
                self._conn, words, project=_project(args),
                since=_iso(since) if since else None, until=_iso(until) if until else None,
                limit=page, offset=offset, hidden_sources=hidden,
                max_chars=SEARCH_READ_CHARS)
            for row in rows:
                text = mask_extra(redact(row["content"]), masks)
                if all(w in text.lower() for w in lowered):
                    found.append({**row, "content": text[:SEARCH_ANSWER_CHARS]})
            if len(found) >= limit or len(rows) < page:
                break
            offset += page
        return {"messages": found[:limit]}

    async def list_sessions(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """`memoryd sessions`: every session, newest first, with the blocks it was given."""
        return {"sessions": await sessions_with_given(
            self._conn, status=_opt_text(args, "status"), source=_opt_text(args, "source"))}

    async def sync(self, args: Mapping[str, Any]) -> dict[str, Any]:
        session = _opt_text(args, "session")
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
        """A hook's event; returns `context` (a block, or None) and the memory ids in it."""
        agent = _text(args, "agent")
        event = _text(args, "event")
        if agent not in AGENTS:
            raise ApiError(400, f"agent must be one of {', '.join(AGENTS)}")
        if event not in EVENTS:
            raise ApiError(400, f"event must be one of {', '.join(EVENTS)}")
        agent_session = _opt_text(args, "session_id")
        transcript = _opt_text(args, "transcript_path")
        cwd = _opt_text(args, "cwd")
        project = await links.resolve(self._conn, project_path(cwd) if cwd else None)
        kind = SourceKind(agent)
        if transcript is not None and self._admitted(transcript, kind, args):
            await self._runtime.follow(transcript, kind,
                                       read_to_end=event in ("pre_compact", "end"))
        if event in ("pre_compact", "end", "stop"):
            await self._session_ended_or_synced(event, transcript, agent_session)
            return {"context": None, "memory_ids": []}
        if not self.settings.agents.inject:
            return {"context": None, "memory_ids": []}
        if event == "start":
            block_text, ids = await self._start_context(project, agent)
        else:
            block_text, ids = await self._prompt_context(
                _text(args, "prompt", default=""), project, agent_session, agent)
        if block_text is not None:
            await self._record(Injection(agent=agent, agent_session_id=agent_session,
                                         interface="hook", event=event, project=project,
                                         memory_ids=tuple(ids), chars=len(block_text)))
        return {"context": block_text, "memory_ids": ids}

    def _admitted(self, transcript: str, kind: SourceKind, args: Mapping[str, Any]) -> bool:
        """Whether a transcript a hook named may be read (`discovery.admit_transcript`):
        inside a configured root of its agent, the agent's default directory or the one
        the hook found in the agent's environment (`transcript_root`). A refusal is
        logged once per path."""
        roots = [str(s.root) for s in self.settings.enabled_sources() if s.kind == kind]
        roots.append(os.path.expanduser(DEFAULT_ROOTS[kind]))
        told = _opt_text(args, "transcript_root")
        if told is not None and _plausible_root(told, kind):
            roots.append(told)
        refusal = admit_transcript(transcript, roots)
        if refusal is None:
            return True
        if transcript not in self._refused:
            if len(self._refused) < REFUSALS_REMEMBERED:
                self._refused.add(transcript)
            log.warning("transcript_refused", agent=kind.value, path=transcript[:300],
                        reason=refusal)
        return False

    async def _session_ended_or_synced(self, event: str, transcript: str | None,
                                       agent_session: str | None) -> None:
        session = await self._find_agent_session(transcript, agent_session)
        if session is None:
            log.info("hook_session_unknown", hook_event=event, agent_session_id=agent_session)
            return
        session_id = int(session["id"])
        if event == "stop":
            self._runtime.sync_later(session_id, self.settings.agents.stop_sync_delay)
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

    async def _start_context(self, project: str | None,
                             agent: str) -> tuple[str | None, list[str]]:
        scope: dict[str, Any] = {"agent": agent, **({"project": project} if project else {})}
        explicit = await self._recall(
            "", scope, limit=40,
            types=[MemoryType.FACT, MemoryType.CORRECTION, MemoryType.PROJECT_CONTEXT])
        recent_scope = {**scope, "since": _iso(self.clock.now() - timedelta(days=RECENT_DAYS))}
        recent = []
        if project:
            for kinds in ([MemoryType.SESSION_SUMMARY], [MemoryType.CONVERSATION]):
                found = await self._recall("", recent_scope, limit=MAX_LIMIT, types=kinds,
                                           order="recent")
                recent += [r for r in found if r.project == project][:RECENT_ITEMS]
        weighty = await self._recall("", scope, limit=10) if project else []
        chosen: dict[str, RecallResult] = {}
        for result in [*explicit, *recent, *weighty]:
            chosen.setdefault(result.memory_id, result)
        if not chosen:
            return None, []
        max_chars = self.settings.agents.start_context_chars
        block = build_context(list(chosen.values()), budget=max_chars // 4, max_chars=max_chars)
        if not block.items:
            return None, []
        return block.text, [item.result.memory_id for item in block.items]

    async def _prompt_context(self, prompt: str, project: str | None,
                              agent_session: str | None,
                              agent: str) -> tuple[str | None, list[str]]:
        query = prompt[:PROMPT_QUERY_CHARS]
        if not query.strip():
            return None, []
        scope: dict[str, Any] = {"agent": agent, **({"project": project} if project else {})}
        results = await self._recall(query, scope, limit=20)
        floor = self.settings.agents.prompt_min_relevance
        given = await injected_memory_ids(self._conn, agent_session) if agent_session else set()
        fresh = [r for r in results if r.memory_id not in given
                 and coverage(query, r.excerpt or r.content) >= floor]
        if not fresh:
            return None, []
        block = build_context(fresh, budget=self.settings.agents.prompt_budget_tokens)
        if not block.items:
            return None, []
        return block.text, [item.result.memory_id for item in block.items]

    async def run(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Operation `name` with its audit record (`store/audit.py`), whatever its outcome."""
        operation = OPERATIONS.get(name)
        if operation is None:
            raise ApiError(404, f"no operation {name!r}")
        try:
            self._same_user(args)
            result = await operation(self, args)
        except (MemorydError, ValueError) as exc:
            await self._audit(name, args, None, failure=str(exc))
            raise
        await self._audit(name, args, result)
        return result

    def _same_user(self, args: Mapping[str, Any]) -> None:
        """Memories never cross users: a client configured for another `memory.user` than
        this daemon's is refused (clients without a user are the daemon's own: its socket
        is its OS user's alone)."""
        asking = args.get("client_user")
        if asking is not None and asking != memory_user(self.settings):
            raise ApiError(403, f"this memoryd keeps the memories of user"
                                f" {memory_user(self.settings)!r}, not {asking!r}")

    async def _audit(self, name: str, args: Mapping[str, Any], result: dict[str, Any] | None,
                     *, failure: str | None = None) -> None:
        def text(key: str) -> str | None:
            value = args.get(key)
            return value if isinstance(value, str) and value else None

        ids, count = audit.ids_in(result)
        if text("memory_id") is not None:
            ids = (text("memory_id") or "", *ids)
        action = name if name != "session_event" else f"session_event:{text('event')}"
        event = audit.AuditEvent(
            interface=text("interface") or "api", action=action,
            outcome="failed" if failure is not None else "ok", agent=text("agent"),
            agent_session_id=text("agent_session_id") or text("session_id"),
            memory_ids=ids, count=count, detail=failure)
        try:
            async with self._writing:
                await audit.record(self._conn, event, self.clock.now())
        except MemorydError as exc:
            # The operation stands; only its record is lost (said in the log).
            log.warning("audit_not_recorded", action=action, error=str(exc))

    async def _record(self, injection: Injection) -> None:
        try:
            async with self._writing:
                await record_injection(self._conn, injection, self.clock.now())
        except MemorydError as exc:
            # What was given is still given; only its record is lost.
            log.warning("injection_not_recorded", error=str(exc))


Operation = Callable[[MemoryOps, Mapping[str, Any]], Awaitable[dict[str, Any]]]
#: What the API serves, by the name in `POST /v1/<name>`.
OPERATIONS: dict[str, Operation] = {
    "recall": MemoryOps.recall,
    "recall_temporal": MemoryOps.recall_temporal,
    "context": MemoryOps.context,
    "remember": MemoryOps.remember,
    "correct": MemoryOps.correct,
    "forget": MemoryOps.forget,
    "retention": MemoryOps.retention,
    "forget_user": MemoryOps.forget_user,
    "hold": MemoryOps.hold,
    "holds": MemoryOps.list_holds,
    "release_hold": MemoryOps.release_hold,
    "transcripts": MemoryOps.transcripts,
    "get_memory": MemoryOps.get_memory,
    "link_project": MemoryOps.link_project,
    "project_links": MemoryOps.project_links,
    "unlink_project": MemoryOps.unlink_project,
    "search_sessions": MemoryOps.search_sessions,
    "list_sessions": MemoryOps.list_sessions,
    "sync": MemoryOps.sync,
    "session_event": MemoryOps.session_event,
    "open_ui": MemoryOps.open_ui,
}


async def _forget_other_user(settings: Settings, clock: Clock, user: str) -> int:
    """Hard-forget `user`'s memories in the shared PostgreSQL layer (opened as them)."""
    pg = settings.memory.postgres.model_copy(update={"user": user})
    as_them = settings.model_copy(
        update={"memory": settings.memory.model_copy(update={"postgres": pg})})
    backend = await opener("postgres", as_them, clock, None)()
    try:
        return await backend.forget_where(all=True, hard=True)
    finally:
        await backend.close()


def _plausible_root(path: str, kind: SourceKind) -> bool:
    """Whether a transcript root a hook reports can be the agent's own: an absolute path
    ending in the agent's folder (`projects`, `sessions`, `.gemini/tmp`) below a home
    directory, never `/` or a system folder that would admit every file of the user's."""
    _variable, folder = AGENT_HOME_ENV[kind.value]
    clean = os.path.normpath(path)
    home = os.path.dirname(clean[: -len(folder)].rstrip(os.sep)) if clean.endswith(
        os.sep + folder) else ""
    return os.path.isabs(clean) and bool(home) and home != os.sep


def _refuse_if_held(held: holds.Holds, project: str | None, session_id: int | None,
                    session_external_id: str | None) -> None:
    if held.covers(project=project, session_id=session_id,
                   session_external_id=session_external_id):
        raise ApiError(409, "a legal hold covers this (`memoryd hold list`); release it"
                            " before deleting anything it keeps")


# -- argument checking ---------------------------------------------------------------

def _text(args: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = args.get(name, default)
    if value is None:
        raise ApiError(400, f"{name} is required")
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string")
    if default is None and not value.strip():
        raise ApiError(400, f"{name} is empty")
    return value


def _opt_text(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string")
    return value


def _int(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be a whole number")
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be from {low} to {high}")
    return value


def _bool(args: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = args.get(name, default)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false")
    return value


def _when(args: Mapping[str, Any], name: str, now: datetime) -> datetime | None:
    value = _opt_text(args, name)
    if value is None:
        return None
    try:
        return parse_when(value, now)
    except (WhenError, OverflowError, ValueError) as exc:
        raise ApiError(400, f"{name}: {exc}") from None


def _types(args: Mapping[str, Any]) -> list[MemoryType] | None:
    value = args.get("types")
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError(400, "types must be a list")
    try:
        return [MemoryType(v) for v in value]
    except ValueError:
        raise ApiError(400, "types: one of " + ", ".join(t.value for t in MemoryType)) from None


def _agent(args: Mapping[str, Any]) -> str | None:
    """The agent asking (claude, codex, gemini, ...), whose private memories it may see;
    None: no agent (shared memories only in recall)."""
    try:
        return agent_name(_opt_text(args, "agent"))
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


def _project(args: Mapping[str, Any]) -> str | None:
    value = _opt_text(args, "project")
    return project_path(value) if value is not None else None




def _iso(moment: datetime) -> str:
    return moment.isoformat()
