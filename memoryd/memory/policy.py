"""The rules every backend shares, written once: forgetting and what recall may return.
Each backend keeps only its dialect.

`forget_where` (see `protocol.MemoryBackend`) selects by session (memoryd's id on
this machine, or the agent's own), by project, by exact ids, or everything, never
"everything" with a filter and never nothing at all (`ForgetScope.check`). What
it selects it tombstones or deletes, and it remembers what the scope may bring
later (`ForgetScope.lasting`), so that forgetting sticks:

- a forgotten session's later segments, a re-ingested transcript, a re-sync, an
  import never bring it back (`session`: the agent's id, from the request and
  from every selected memory; `session_id`: memoryd's own number);
- a forgotten project's conversations that began before the forget never come
  back; new ones are kept (`project`, with the time of the forget).

`is_forgotten` is the rule a saved memory is checked against; SQL backends write
the same rule as a query over their `forgotten_scopes` table.

`recall_filters` is what a recall may return (live, visible to the asking agent, in
the project, in the time span, of the types asked for), as SQL terms written with
the backend's own placeholders.

`injectable` is what may reach an agent by itself (a hook's block, `memory_context`):
a project's own memories, and memories of no project only when the person said them
for every project (`memoryd remember`, the viewer), never words lifted from a session
that had no project, nor what an agent's tool saved there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memoryd.memory.models import Memory, MemoryType, RecallResult


@dataclass(frozen=True, slots=True)
class ForgetScope:
    """What a `forget_where` call selects (the filters AND-ed, or `all`)."""

    session_id: int | None = None
    session_external_id: str | None = None
    project: str | None = None
    all: bool = False
    memory_ids: Sequence[str] | None = None

    def check(self) -> None:
        """ValueError unless exactly one of `all` and the filters is given."""
        named = (self.session_id, self.session_external_id, self.project, self.memory_ids)
        if self.all and any(value is not None for value in named):
            raise ValueError("all=True forgets everything: give no other filter with it")
        if not self.all and all(value is None for value in named):
            raise ValueError("give a session, a project, or all=True")

    def lasting(self, selected_external_ids: Iterable[str | None], *,
                session_id_value: str | None = None) -> set[tuple[str, str]]:
        """The (kind, value) scopes to remember: what this forget must keep out later.

        `selected_external_ids` are the agents' session ids of the memories selected;
        `session_id_value` is how this backend writes memoryd's session number (a shared
        database prefixes the machine it came from)."""
        scopes: set[tuple[str, str]] = set()
        if self.project is not None:
            scopes.add(("project", self.project))
        if self.session_id is not None:
            scopes.add(("session_id", session_id_value or str(self.session_id)))
        if self.session_id is not None or self.session_external_id is not None:
            if self.session_external_id is not None:
                scopes.add(("session", self.session_external_id))
            scopes.update(("session", external) for external in selected_external_ids
                          if external)
        return scopes


def began(memory: Memory) -> datetime:
    """When the conversation behind a memory began (what a project's forget compares)."""
    prov = memory.provenance
    return prov.started_at or prov.ended_at or memory.created_at


def is_forgotten(memory: Memory, scopes: Mapping[tuple[str, str], datetime], *,
                 session_id_value: str | None = None) -> bool:
    """Whether `memory` belongs to a forgotten session, or to a conversation of a forgotten
    project that began before the project was forgotten (`scopes`: (kind, value) -> when)."""
    prov = memory.provenance
    if prov.session_external_id and ("session", prov.session_external_id) in scopes:
        return True
    if prov.session_id is not None and (
            "session_id", session_id_value or str(prov.session_id)) in scopes:
        return True
    at = scopes.get(("project", memory.project)) if memory.project is not None else None
    return at is not None and began(memory) <= at


@dataclass(frozen=True, slots=True)
class RecallFilters:
    """What a recall may return, as SQL over memories `m`: the WHERE terms and their
    parameters, and `tier` (0 for the asked project or none, 1 for others when every
    project is searched), in the backend's own placeholder style."""

    where: list[str]
    params: dict[str, Any]
    tier: str
    #: The project condition, when recall is held to one project (chunks filter on it).
    in_project: str | None


def recall_filters(
    param: Callable[[str], str], *, moment: Callable[[datetime], Any],
    project: str | None, since: datetime | None, until: datetime | None,
    types: Iterable[MemoryType] | None, all_projects: bool, agent: str | None,
) -> RecallFilters | None:
    """The rules every backend's recall applies (None: nothing can match):

    - live memories only (neither forgotten nor superseded);
    - another agent's private memories never; the asking agent's own, yes;
    - in a project: its memories and those of no project (first, when `all_projects`);
    - `since`/`until` select memories whose conversation (or creation) overlaps them;
    - `types`, when given, is the whole list of types wanted.

    `param(name)` writes a placeholder in the backend's dialect; `moment(t)` a time
    as the backend stores it."""
    params: dict[str, Any] = {}
    where = ["m.deleted_at IS NULL", "m.superseded_by IS NULL"]
    if agent is None:
        where.append("m.private_to IS NULL")
    else:
        where.append(f"(m.private_to IS NULL OR m.private_to = {param('agent')})")
        params["agent"] = agent
    tier, held_to = "0", None
    if project is not None:
        params["project"] = project
        in_project = f"(m.project = {param('project')} OR m.project IS NULL)"
        if all_projects:
            tier = f"(CASE WHEN {in_project} THEN 0 ELSE 1 END)"
        else:
            where.append(in_project)
            held_to = in_project
    if since is not None:
        where.append(f"COALESCE(m.ended_at, m.started_at, m.created_at) >= {param('since')}")
        params["since"] = moment(since)
    if until is not None:
        where.append(f"COALESCE(m.started_at, m.created_at) < {param('until')}")
        params["until"] = moment(until)
    if types is not None:
        wanted = sorted({MemoryType(t).value for t in types})
        if not wanted:
            return None
        names = [f"type{i}" for i in range(len(wanted))]
        where.append(f"m.type IN ({', '.join(param(n) for n in names)})")
        params.update(zip(names, wanted, strict=True))
    return RecallFilters(where, params, tier, held_to)


#: Seconds between checks of every chunk for a missing vector. In between, the
#: background job looks only past the last chunk it saw embedded: with nothing to
#: do, a check of every chunk is a scan of the store (157 ms at 100,000 memories on
#: a 2-core machine, every 5 s), and a new chunk always gets a higher seq. What the
#: full check still catches: a seq SQLite gives again after the newest chunks were
#: deleted, a memory made live again, and in PostgreSQL a chunk whose transaction
#: committed after one with a higher seq.
FULL_VECTOR_CHECK = 600.0


@dataclass(slots=True)
class VectorMark:
    """How far every live chunk had a vector when the background job last looked."""

    through: int = 0
    checked_at: float = -FULL_VECTOR_CHECK

    def start(self, now: float) -> tuple[int, bool]:
        """(the seq to look past, whether this is a full check)."""
        full = now - self.checked_at >= FULL_VECTOR_CHECK
        return (0 if full else self.through), full

    def caught_up(self, through: int, full: bool, now: float) -> None:
        """Every live chunk up to `through` has a vector. Lowered too, when the newest
        chunks were deleted: a seq SQLite gives again is then above the mark."""
        self.through = through
        if full:
            self.checked_at = now


#: The provenance source of a memory an agent saved through its MCP tools.
FROM_AGENT_TOOL = "mcp"


def injectable(result: RecallResult, project: str | None) -> bool:
    """Whether `result` may be given, unasked, to an agent working in `project`."""
    if result.project is not None:
        return result.project == project
    made = result.provenance
    said_by_person = (made.session_id is None and made.session_external_id is None
                      and made.source != FROM_AGENT_TOOL)
    return said_by_person
