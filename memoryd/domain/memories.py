"""The memory operations a person or an agent asks for (`Memories`): recall, a context
block, remember, correct, forget, get."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from memoryd.domain.core import Core, refuse_everything_from_tools, refuse_if_held
from memoryd.domain.recaller import Recaller
from memoryd.domain.requests import (
    Caller,
    ContextRequest,
    CorrectRequest,
    ForgetRequest,
    GetMemoryRequest,
    RecallRequest,
    RememberRequest,
)
from memoryd.errors import BadRequest, Conflict, NotFound
from memoryd.memory import Capability, MemoryType, memory_to_record
from memoryd.memory.export_format import result_to_record
from memoryd.memory.models import Provenance
from memoryd.memory.policy import FROM_AGENT_TOOL, injectable
from memoryd.memory.privacy.redaction import shown
from memoryd.memory.protocol import IdPrefix
from memoryd.memory.recall.context import build_context
from memoryd.memory.recall.gate import content_words, coverage
from memoryd.store import forgotten, holds, queries
from memoryd.store.injections import Injection

log = structlog.get_logger("memoryd.domain")

#: Recall this many candidates before fitting the best into a context budget.
CONTEXT_CANDIDATES = 60
#: The shortest start of a memory id that names it (as `memoryd show` takes sessions').
MIN_ID_PREFIX = 4
#: Correcting by query: the memory must cover this much of the query's words (gate.coverage).
CORRECT_MIN_COVERAGE = 0.5
#: What a person or an agent may save by hand.
REMEMBERED_TYPES = (MemoryType.FACT, MemoryType.PROJECT_CONTEXT)
WRONG_TYPE = "type must be fact or project_context"


class Memories:
    """Recall and the writes a person or an agent asks for."""

    def __init__(self, core: Core, recaller: Recaller) -> None:
        self._core = core
        self._recaller = recaller

    async def recall(self, request: RecallRequest) -> dict[str, Any]:
        if request.order == "time":
            self._core.require(Capability.TEMPORAL)
        results = await self._recaller.recall(request.query, request.scope,
                                              limit=request.limit, order=request.order)
        if request.record and results:
            caller = request.caller
            await self._core.record(Injection(
                agent=caller.agent or "unknown", agent_session_id=caller.agent_session_id,
                interface=caller.interface, event="recall", project=request.scope.project,
                memory_ids=tuple(r.memory_id for r in results),
                chars=sum(len(r.excerpt or r.content) for r in results)))
        return {"results": [result_to_record(r) for r in results]}

    async def context(self, request: ContextRequest) -> dict[str, Any]:
        core = self._core
        results = await self._recaller.recall(request.query, request.scope,
                                              limit=CONTEXT_CANDIDATES)
        here = await core.linked(request.scope.project)
        if here is not None:
            # A project's block: what is the project's, and what the person said for all.
            results = [r for r in results if injectable(r, here)]
        block = build_context(results, request.budget)
        ids = [item.result.memory_id for item in block.items]
        caller = request.caller
        if caller.agent_session_id is not None or request.record:
            await core.record(Injection(
                agent=caller.agent or "unknown", agent_session_id=caller.agent_session_id,
                interface=caller.interface, event="memory_context",
                project=request.scope.project, memory_ids=tuple(ids), chars=len(block.text)))
        return {"text": block.text, "memory_ids": ids, "tokens": block.tokens,
                "budget": block.budget, "chars": len(block.text),
                "dropped_duplicates": block.dropped_duplicates,
                "dropped_for_budget": block.dropped_for_budget,
                "items": [{**result_to_record(i.result), "line": i.text, "tokens": i.tokens}
                          for i in block.items]}

    async def remember(self, request: RememberRequest) -> dict[str, Any]:
        core = self._core
        if request.type not in REMEMBERED_TYPES:
            raise BadRequest(WRONG_TYPE)
        masks = core.settings.extra_masks()
        tags = [shown(t, masks) for t in request.tags]  # stored and shown as memory text is
        caller = request.caller
        private_to = None
        if request.private:
            private_to = caller.agent
            if private_to in (None, "unknown"):
                raise BadRequest("a private memory needs the agent it is private to (agent)")
        # What an agent's tool saves is marked so: never given to every project unasked.
        made_by = Provenance(source=FROM_AGENT_TOOL) if caller.interface == "mcp" else None
        memory = await core.backend.remember(
            request.content, type=request.type, importance=request.importance,
            project=await core.linked(request.project), tags=tags, private_to=private_to,
            provenance=made_by)
        return {"memory": memory_to_record(memory)}

    async def correct(self, request: CorrectRequest) -> dict[str, Any]:
        core = self._core
        core.require(Capability.CORRECT)
        target, query = request.memory_id, request.query
        if (target is None) == (query is None):
            raise BadRequest("give memory_id or query, not both")
        if target is None:
            assert query is not None
            # Correcting by query replaces a memory the caller has not seen: only one that
            # clearly matches, never merely whatever ranks first.
            if not content_words(query):
                raise BadRequest(f"the query {query[:80]!r} has no words to match;"
                                 " give words, or the memory's id")
            found = await core.backend.recall(query, limit=1, all_projects=True,
                                              agent=request.caller.agent)
            if not found or coverage(query, found[0].content) < CORRECT_MIN_COVERAGE:
                raise NotFound(f"no memory clearly matches {query[:80]!r}"
                               " (see `memoryd recall`; correct by id)")
            target = found[0].memory_id
        old = core.visible(await core.backend.get(target), request.caller)
        if old is None:
            raise NotFound(f"no memory {target}")
        if not old.is_live:
            raise Conflict(f"memory {target} is not live (superseded or forgotten)")
        memory = await core.backend.correct(target, request.content, reason=request.reason)
        return core.noting_copies({"memory": memory_to_record(memory), "replaced": target},
                                  Capability.CORRECT)

    async def forget(self, request: ForgetRequest) -> dict[str, Any]:
        self._core.require(Capability.FORGET)
        return self._core.noting_copies({"forgotten": await self._forget(request)},
                                        Capability.FORGET)

    async def _forget(self, request: ForgetRequest) -> int:
        core = self._core
        hard, memory_id, session = request.hard, request.memory_id, request.session
        project, everything = request.project, request.everything
        if sum(x is not None for x in (memory_id, session, project)) + everything != 1:
            raise BadRequest("give exactly one of memory_id, session, project, all")
        held = await holds.standing(core.conn)
        if everything:
            refuse_everything_from_tools(request.caller, request.confirmed, "forgetting all")
            if held:
                raise Conflict("legal holds stand (`memoryd hold list`): forgetting"
                               " everything would delete what they keep")
            count = await core.backend.forget_where(all=True, hard=hard)
            await self._remember_forgotten(everything=True, hard=hard)
            return count
        if memory_id is not None:
            return await self._forget_memory(memory_id, request.caller, held, hard)
        if project is not None:
            refuse_if_held(held, project, None, None)
        if session is not None:
            return await self._forget_session(session, held, hard)
        count = await core.backend.forget_where(project=project, hard=hard)
        await self._remember_forgotten(project=project, hard=hard)
        return count

    async def _forget_memory(self, memory_id: str, caller: Caller, held: holds.Holds,
                             hard: bool) -> int:
        core = self._core
        if core.visible(await core.backend.get(memory_id), caller) is None:
            return 0
        versions = await core.backend.history(memory_id)
        for version in versions:
            refuse_if_held(held, version.project, version.provenance.session_id,
                           version.provenance.session_external_id)
        # The whole correction chain goes (a correction never outlives what it
        # corrects): every version it changed is counted, not one.
        forgot = sum(1 for v in versions if hard or v.deleted_at is None) if (
            await core.backend.forget(memory_id, hard=hard)) else 0
        for version in versions:
            made_of = version.provenance
            if made_of.session_id is not None and made_of.first_index is not None:
                # The words it was made of, written again in a copy, stay forgotten.
                async with core.writing:
                    await forgotten.remember_forgotten_range(
                        core.conn, core.clock.now(), made_of.session_id,
                        made_of.first_index, made_of.last_index or made_of.first_index)
        return forgot

    async def _forget_session(self, session: str, held: holds.Holds, hard: bool) -> int:
        core = self._core
        found = await queries.find_session(core.conn, session)
        refuse_if_held(held, found.get("project") if found else None,
                       int(found["id"]) if found else None,
                       found.get("external_id") if found else session)
        if found is None:
            count = await core.backend.forget_where(session_external_id=session, hard=hard)
            await self._remember_forgotten(agent_session=session, hard=hard)
            return count
        count = await core.backend.forget_where(session_id=int(found["id"]), hard=hard)
        if found.get("external_id"):
            # By the agent's own id too: it survives a re-ingest into a new store, so
            # the session's later segments are never saved again (forgetting sticks).
            count += await core.backend.forget_where(
                session_external_id=found["external_id"], hard=hard)
        # The subagents it started are part of it (their transcripts are its own).
        children = await forgotten.subagent_sessions(core.conn, int(found["id"]))
        for child in children:
            count += await core.backend.forget_where(session_id=child, hard=hard)
        await self._remember_forgotten(session_ids=[int(found["id"]), *children],
                                       agent_session=found.get("external_id"), hard=hard)
        return count

    async def _remember_forgotten(self, *, session_ids: Sequence[int] = (),
                                  agent_session: str | None = None,
                                  project: str | None = None,
                                  everything: bool = False, hard: bool = False) -> None:
        """Forgetting keys on the content too (`store.forgotten`): a copy of the transcript
        under another name, read as a new session, never brings it back. A hard forget
        clears the archive's text of it too."""
        core = self._core
        async with core.writing:
            keys = await forgotten.remember_forgotten(
                core.conn, core.clock.now(), session_ids=session_ids,
                agent_session=agent_session, project=project, everything=everything,
                hard=hard)
        log.info("content_forgotten", message_keys=keys, sessions=len(session_ids),
                 project=project is not None, everything=everything)

    async def _full_id(self, given: str) -> str:
        """A memory id, or the one id a unique prefix of at least 4 characters names."""
        backend = self._core.backend
        prefix = given.strip().lower()
        if (len(prefix) >= 32 or len(prefix) < MIN_ID_PREFIX
                or not all(c in "0123456789abcdef" for c in prefix)
                or not isinstance(backend, IdPrefix)):
            return given
        found = await backend.ids_with_prefix(prefix, limit=2)
        if len(found) > 1:
            raise BadRequest(f"memory id {prefix} matches more than one memory; give more"
                             " of it")
        return found[0] if found else given

    async def get(self, request: GetMemoryRequest) -> dict[str, Any]:
        core = self._core
        memory_id = await self._full_id(request.memory_id)
        memory = core.visible(await core.backend.get(memory_id), request.caller)
        if memory is None:
            raise NotFound(f"no memory {memory_id}")
        if request.record_use:
            await core.backend.record_use([memory.id])
        history = await core.backend.history(memory_id)
        return {"memory": memory_to_record(memory),
                "history": [memory_to_record(m) for m in history]}
