"""What an agent is told by itself (`Blocks`): the project briefing at a session's start
and, at each prompt, the memories the prompt needs that the session was not given.

- the start block: explicit facts and corrections first, then the project's state as
  its sessions left it (`memoryd.briefing`), what a model noted, and raw conversation
  only of sessions without a digest; at most `agents.start_context_chars`.
- the prompt block: recall for the prompt, giving only memories whose relevance reaches
  `agents.prompt_min_relevance` and that this agent session was not given before,
  within `agents.prompt_budget_tokens`; nothing when nothing qualifies.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from memoryd.briefing import project_state, render
from memoryd.domain.core import MAX_LIMIT, Core
from memoryd.domain.recaller import Recaller
from memoryd.domain.requests import Scope
from memoryd.lifecycle.markup import without_injected
from memoryd.memory import MemoryType, RecallResult
from memoryd.memory.policy import injectable
from memoryd.memory.recall.context import build_context
from memoryd.memory.recall.gate import content_words
from memoryd.memory.recall.spoken_time import passes_gate, spoken_time
from memoryd.store.injections import injected_memory_ids
from memoryd.store.sessions import digest_reach

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
#: Memories given earlier in an agent session looked at to find the digests among them.
MAX_GIVEN_LOOKUPS = 200

#: A block's text (None: nothing to say) and the memory ids it holds.
Block = tuple[str | None, list[str]]
SessionKey = tuple[str | None, int | str | None]


def _said_share(text: str, said: str) -> float:
    """The share of `text`'s content words that `said` holds already."""
    words = content_words(text)
    if not words:
        return 1.0
    known = set(content_words(said))
    return sum(word in known for word in words) / len(words)


def _session_of(result: RecallResult) -> SessionKey:
    p = result.provenance
    return (p.source, p.session_id if p.session_id is not None else p.session_external_id)


class Blocks:
    """The start and prompt blocks of an agent's session."""

    def __init__(self, core: Core, recaller: Recaller) -> None:
        self._core = core
        self._recaller = recaller

    async def start(self, project: str | None, agent: str,
                    agent_session: str | None = None) -> Block:
        """The project briefing (`memoryd.briefing`): the state the project's sessions left,
        from their digests; what people stated (the project's and every project's), what
        a model noted, and raw conversation only of sessions without a digest. Nothing of
        a session outside the project, nor of one in no project. A session resumed or
        continued (`claude --resume`, `codex exec resume`) was given a block already: it is
        told only what is new since (`agent_session`)."""
        core, recall = self._core, self._recaller.recall
        scope = Scope(agent=agent, project=project)
        given = (await injected_memory_ids(core.conn, agent_session) if agent_session
                 else set())

        def new(results: list[RecallResult]) -> list[RecallResult]:
            # Nor what the resumed session itself said: its own digest is its own history.
            return [r for r in results if r.memory_id not in given
                    and (agent_session is None
                         or r.provenance.session_external_id != agent_session)]

        explicit = new([r for r in await recall("", replace(scope, types=(
            MemoryType.FACT, MemoryType.CORRECTION, MemoryType.PROJECT_CONTEXT)), limit=40)
            if injectable(r, project)])
        digests: list[RecallResult] = []
        noted: list[RecallResult] = []
        other: list[RecallResult] = []
        if project:
            # The project's own: a project's recall also holds memories of no project, and
            # those of a session with no project (a chat in no folder) are not this one's
            # history; what a person stated for every project comes with `explicit`.
            found = await recall("", replace(scope, types=(MemoryType.SESSION_DIGEST,)),
                                 limit=START_DIGESTS, order="recent")
            all_digests = [r for r in found if r.project == project]
            digested = {_session_of(r) for r in all_digests}
            digests = new(all_digests)
            noted = new([r for r in await recall(
                "", replace(scope, types=(MemoryType.OBSERVATION,)), limit=START_NOTED,
                order="recent") if r.project == project and injectable(r, project)])
            since = core.clock.now() - timedelta(days=RECENT_DAYS)
            for kind in (MemoryType.SESSION_SUMMARY, MemoryType.CONVERSATION):
                found = await recall("", replace(scope, types=(kind,), since=since),
                                     limit=MAX_LIMIT, order="recent")
                other += new(await self._undigested(
                    [r for r in found if r.project == project
                     and _session_of(r) not in digested]))[:RECENT_ITEMS]
        briefing = render(project_state(digests), project=project, explicit=explicit,
                          noted=noted, other=other,
                          limit=core.settings.agents.start_context_chars)
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
        reach = await digest_reach(self._core.conn, [
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

    async def prompt(self, prompt: str, project: str | None, agent_session: str | None,
                     agent: str) -> Block:
        """The memories `prompt` needs that this agent session was not given already."""
        core = self._core
        # Gemini's BeforeAgent prompt starts with the hook context it was given: the
        # question is what the person typed, not memoryd's own block.
        query = without_injected(prompt).strip()[:PROMPT_QUERY_CHARS]
        if not query:
            return None, []
        results = await self._recaller.recall(query, Scope(agent=agent, project=project),
                                              limit=20)
        floor = core.settings.agents.prompt_min_relevance
        # A memory of the time the prompt speaks of answers for its time words, and a
        # prompt that is only a time is for memories of then (`recall/spoken_time.py`).
        spoken = spoken_time(query, core.clock.now())
        given = (await injected_memory_ids(core.conn, agent_session) if agent_session
                 else set())
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
        block = build_context(fresh, budget=core.settings.agents.prompt_budget_tokens)
        if not block.items:
            return None, []
        return block.text, [item.result.memory_id for item in block.items]

    async def _digested_sessions(self, given: set[str], results: list[RecallResult],
                                 ) -> dict[SessionKey, str]:
        """The sessions among `results`' whose digest is among the memories `given`, with
        what that digest says."""
        if not given:
            return {}
        sessions = {_session_of(r) for r in results if r.type is MemoryType.CONVERSATION}
        if not sessions:
            return {}
        found: dict[SessionKey, str] = {}
        for memory_id in sorted(given)[:MAX_GIVEN_LOOKUPS]:
            memory = await self._core.backend.get(memory_id)
            if memory is not None and memory.type is MemoryType.SESSION_DIGEST:
                p = memory.provenance
                key = (p.source, p.session_id if p.session_id is not None
                       else p.session_external_id)
                if key in sessions:
                    found[key] = memory.content
        return found
