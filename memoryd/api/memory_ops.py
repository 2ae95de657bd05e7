"""The memory operations: recall, context blocks, remember, correct, forget, get."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from memoryd.api import args as arg
from memoryd.api.shared import (
    MAX_LIMIT,
    OpsBase,
    refuse_if_held,
)
from memoryd.errors import ApiError
from memoryd.memory import Capability, MemoryType, memory_to_record
from memoryd.memory.export_format import result_to_record
from memoryd.memory.models import Provenance
from memoryd.memory.policy import FROM_AGENT_TOOL, injectable
from memoryd.memory.privacy.redaction import shown
from memoryd.memory.protocol import IdPrefix
from memoryd.memory.recall.context import DEFAULT_BUDGET, MIN_BUDGET, build_context
from memoryd.memory.recall.gate import content_words, coverage
from memoryd.store import forgotten, holds, queries
from memoryd.store.injections import Injection

log = structlog.get_logger("memoryd.api")

#: Recall this many candidates before fitting the best into a context budget.
CONTEXT_CANDIDATES = 60
#: The shortest start of a memory id that names it (as `memoryd show` takes sessions').
MIN_ID_PREFIX = 4
#: Correcting by query: the memory must cover this much of the query's words (gate.coverage).
CORRECT_MIN_COVERAGE = 0.5


class MemoryOperations(OpsBase):
    """Recall and the writes a person or an agent asks for."""

    async def recall(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = arg.text(args, "query", default="")
        results = await self._recall(query, args,
                                     limit=arg.integer(args, "limit", 10, 1, MAX_LIMIT))
        if arg.flag(args, "record") and results:
            await self._record(Injection(
                agent=arg.opt_text(args, "agent") or "unknown",
                agent_session_id=arg.opt_text(args, "agent_session_id"),
                interface=arg.opt_text(args, "interface") or "api", event="recall",
                project=arg.project(args), memory_ids=tuple(r.memory_id for r in results),
                chars=sum(len(r.excerpt or r.content) for r in results)))
        return {"results": [result_to_record(r) for r in results]}

    async def recall_temporal(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self._require(Capability.TEMPORAL)
        if args.get("since") is None:
            raise ApiError(400, "since is required (an ISO date, 'yesterday', 'last week')")
        results = await self._recall(arg.text(args, "query", default=""), args,
                                     limit=arg.integer(args, "limit", 50, 1, MAX_LIMIT),
                                     order="time")
        return {"results": [result_to_record(r) for r in results]}

    async def context(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = arg.text(args, "query", default="")
        budget = arg.integer(args, "budget", DEFAULT_BUDGET, MIN_BUDGET, 100_000)
        results = await self._recall(query, args, limit=CONTEXT_CANDIDATES)
        here = await self._linked(args)
        if here is not None:
            # A project's block: what is the project's, and what the person said for all.
            results = [r for r in results if injectable(r, here)]
        block = build_context(results, budget)
        ids = [item.result.memory_id for item in block.items]
        agent_session = arg.opt_text(args, "agent_session_id")
        if agent_session is not None or arg.flag(args, "record"):
            await self._record(Injection(
                agent=arg.opt_text(args, "agent") or "unknown", agent_session_id=agent_session,
                interface=arg.opt_text(args, "interface") or "api", event="memory_context",
                project=arg.project(args), memory_ids=tuple(ids), chars=len(block.text)))
        return {"text": block.text, "memory_ids": ids, "tokens": block.tokens,
                "budget": block.budget, "chars": len(block.text),
                "dropped_duplicates": block.dropped_duplicates,
                "dropped_for_budget": block.dropped_for_budget,
                "items": [{**result_to_record(i.result), "line": i.text, "tokens": i.tokens}
                          for i in block.items]}

    async def remember(self, args: Mapping[str, Any]) -> dict[str, Any]:
        content = arg.text(args, "content")
        kind = arg.opt_text(args, "type") or "fact"
        if kind not in ("fact", "project_context"):
            raise ApiError(400, "type must be fact or project_context")
        importance = args.get("importance")
        if importance is not None and (isinstance(importance, bool) or not isinstance(
                importance, int | float) or not 0.0 <= float(importance) <= 1.0):
            raise ApiError(400, "importance must be a number from 0 to 1")
        tags = args.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ApiError(400, "tags must be a list of strings")
        masks = self.settings.extra_masks()
        tags = [shown(t, masks) for t in tags]  # stored and shown as memory text is
        private_to = None
        if arg.flag(args, "private"):
            private_to = arg.agent(args)
            if private_to in (None, "unknown"):
                raise ApiError(400, "a private memory needs the agent it is private to"
                                    " (agent)")
        # What an agent's tool saves is marked so: never given to every project unasked.
        made_by = (Provenance(source=FROM_AGENT_TOOL)
                   if arg.opt_text(args, "interface") == "mcp" else None)
        memory = await self._backend.remember(
            content, type=MemoryType(kind),
            importance=None if importance is None else float(importance),
            project=await self._linked(args), tags=tags, private_to=private_to,
            provenance=made_by)
        return {"memory": memory_to_record(memory)}

    async def correct(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self._require(Capability.CORRECT)
        content = arg.text(args, "content")
        target = arg.opt_text(args, "memory_id")
        query = arg.opt_text(args, "query")
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
                                               agent=arg.agent(args))
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
                                             reason=arg.opt_text(args, "reason"))
        return self._noting_copies({"memory": memory_to_record(memory), "replaced": target},
                                   Capability.CORRECT)

    async def forget(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self._require(Capability.FORGET)
        return self._noting_copies({"forgotten": await self._forget(args)}, Capability.FORGET)

    async def _forget(self, args: Mapping[str, Any]) -> int:
        hard = arg.flag(args, "hard")
        memory_id = arg.opt_text(args, "memory_id")
        session = arg.opt_text(args, "session")
        project = arg.project(args)
        everything = arg.flag(args, "all")
        if sum(x is not None for x in (memory_id, session, project)) + everything != 1:
            raise ApiError(400, "give exactly one of memory_id, session, project, all")
        held = await holds.standing(self._conn)
        if everything:
            arg.confirmed_everything(args, "forgetting all")
            if held:
                raise ApiError(409, "legal holds stand (`memoryd hold list`): forgetting"
                                    " everything would delete what they keep")
            count = await self._backend.forget_where(all=True, hard=hard)
            await self._remember_forgotten(everything=True, hard=hard)
            return count
        if memory_id is not None:
            if self._visible(await self._backend.get(memory_id), args) is None:
                return 0
            versions = await self._backend.history(memory_id)
            for version in versions:
                refuse_if_held(held, version.project, version.provenance.session_id,
                                version.provenance.session_external_id)
            # The whole correction chain goes (a correction never outlives what it
            # corrects): every version it changed is counted, not one.
            forgot = sum(1 for v in versions if hard or v.deleted_at is None) if (
                await self._backend.forget(memory_id, hard=hard)) else 0
            for version in versions:
                made_of = version.provenance
                if made_of.session_id is not None and made_of.first_index is not None:
                    # The words it was made of, written again in a copy, stay forgotten.
                    async with self._writing:
                        await forgotten.remember_forgotten_range(
                            self._conn, self.clock.now(), made_of.session_id,
                            made_of.first_index, made_of.last_index or made_of.first_index)
            return forgot
        if project is not None:
            refuse_if_held(held, project, None, None)
        if session is not None:
            found = await queries.find_session(self._conn, session)
            refuse_if_held(held, found.get("project") if found else None,
                            int(found["id"]) if found else None,
                            found.get("external_id") if found else session)
            if found is None:
                count = await self._backend.forget_where(session_external_id=session, hard=hard)
                await self._remember_forgotten(agent_session=session, hard=hard)
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
                                           agent_session=found.get("external_id"), hard=hard)
            return count
        count = await self._backend.forget_where(project=project, hard=hard)
        await self._remember_forgotten(project=project, hard=hard)
        return count

    async def _remember_forgotten(self, *, session_ids: Sequence[int] = (),
                                  agent_session: str | None = None,
                                  project: str | None = None,
                                  everything: bool = False, hard: bool = False) -> None:
        """Forgetting keys on the content too (`store.forgotten`): a copy of the transcript
        under another name, read as a new session, never brings it back. A hard forget
        clears the archive's text of it too."""
        async with self._writing:
            keys = await forgotten.remember_forgotten(
                self._conn, self.clock.now(), session_ids=session_ids,
                agent_session=agent_session, project=project, everything=everything,
                hard=hard)
        log.info("content_forgotten", message_keys=keys, sessions=len(session_ids),
                 project=project is not None, everything=everything)

    async def _full_id(self, given: str) -> str:
        """A memory id, or the one id a unique prefix of at least 4 characters names."""
        prefix = given.strip().lower()
        if (len(prefix) >= 32 or len(prefix) < MIN_ID_PREFIX
                or not all(c in "0123456789abcdef" for c in prefix)
                or not isinstance(self._backend, IdPrefix)):
            return given
        found = await self._backend.ids_with_prefix(prefix, limit=2)
        if len(found) > 1:
            raise ApiError(400, f"memory id {prefix} matches more than one memory; give more"
                                " of it")
        return found[0] if found else given

    async def get_memory(self, args: Mapping[str, Any]) -> dict[str, Any]:
        memory_id = await self._full_id(arg.text(args, "memory_id"))
        memory = self._visible(await self._backend.get(memory_id), args)
        if memory is None:
            raise ApiError(404, f"no memory {memory_id}")
        if arg.flag(args, "record_use", default=True):
            await self._backend.record_use([memory.id])
        history = await self._backend.history(memory_id)
        return {"memory": memory_to_record(memory),
                "history": [memory_to_record(m) for m in history]}
