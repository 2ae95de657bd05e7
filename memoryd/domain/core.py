"""What every part of the domain works over (`Core`): settings, clock, the daemon's store
connection, the memory backend and the runtime, and the few rules they all keep."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.config import Settings, SourceKind
from memoryd.domain.requests import Caller
from memoryd.errors import BadRequest, Conflict, MemorydError, NotPermitted, NotSupported
from memoryd.lifecycle.recovery import SyncReport
from memoryd.memory import Capability, MemoryBackend
from memoryd.memory.models import Memory, visible_to
from memoryd.store import holds, links
from memoryd.store.injections import Injection, record_injection

log = structlog.get_logger("memoryd.domain")

#: The most results one request may ask for.
MAX_LIMIT = 200
#: The words a request that forgets everything must carry, as `--yes` on the command
#: line: a process of the person's (an agent's shell among them) cannot wipe memory by
#: accident.
CONFIRM_EVERYTHING = "forget everything"


class Runtime(Protocol):
    """What only a process that ingests can do: the daemon, or a direct fallback."""

    async def follow(self, path: str, kind: SourceKind, *, read_to_end: bool) -> None:
        """Follow this transcript; with `read_to_end`, return once it is stored to its end."""
        ...

    async def catch_up(self, seconds: float) -> None:
        """Read what the transcripts hold now, for at most `seconds` (no-op without a
        daemon: the hook then reads the stores as they are)."""
        ...

    async def sync(self, session_id: int | None) -> SyncReport:
        """Save the unsynced messages of one session (or all) to memory now."""
        ...

    def sync_later(self, session_id: int, delay: float, *,
                   settle_questions: bool = False) -> None:
        """Ask for a sync of this session after `delay` seconds (later asks replace it);
        `settle_questions` holds back a question still waiting for its answer."""
        ...

    async def open_ui(self) -> str:
        """Serve the web viewer (started on first use); the address that logs a browser in."""
        ...


class Core:
    """The state the domain's parts share, and the helpers they all use."""

    def __init__(self, settings: Settings, clock: Clock, conn: aiosqlite.Connection,
                 backend: MemoryBackend, runtime: Runtime) -> None:
        self.settings = settings
        self.clock = clock
        self.conn = conn
        self.backend = backend
        self.runtime = runtime
        # One transaction at a time on the shared connection (concurrent requests).
        self.writing = asyncio.Lock()

    async def linked(self, project: str | None) -> str | None:
        """A project by its new path when it was linked to one."""
        return await links.resolve(self.conn, project)

    @staticmethod
    def visible(memory: Memory | None, caller: Caller) -> Memory | None:
        """`memory`, unless an agent asks and it is another agent's private memory (a
        person, asking without an agent, sees all of their own memories by id)."""
        if memory is None or not caller.as_agent or visible_to(memory.private_to,
                                                               caller.agent):
            return memory
        return None

    def require(self, capability: Capability) -> None:
        if capability not in self.backend.capabilities:
            raise NotSupported(f"the {self.backend.name} memory backend cannot"
                               f" {capability.value}")

    def noting_copies(self, answer: dict[str, Any], capability: Capability) -> dict[str, Any]:
        """`answer`, plus the layers that cannot do `capability` and so keep their copy as it
        was (the Memory Gateway keeps what is forgotten or corrected elsewhere)."""
        cannot = getattr(self.backend, "cannot", None)
        remains = cannot(capability) if cannot is not None else []
        return {**answer, "remains_in": remains} if remains else answer

    async def record(self, injection: Injection) -> None:
        """Record a block or results given to an agent (never their text)."""
        try:
            async with self.writing:
                await record_injection(self.conn, injection, self.clock.now())
        except MemorydError as exc:
            # What was given is still given; only its record is lost.
            log.warning("injection_not_recorded", error=str(exc))


def refuse_if_held(held: holds.Holds, project: str | None, session_id: int | None,
                   session_external_id: str | None) -> None:
    if held.covers(project=project, session_id=session_id,
                   session_external_id=session_external_id):
        raise Conflict("a legal hold covers this (`memoryd hold list`); release it"
                       " before deleting anything it keeps")


def refuse_everything_from_tools(caller: Caller, confirmed: bool, what: str) -> None:
    """A request that forgets everything must say so in words, and never comes from an
    agent's tools (a model never forgets everything)."""
    if caller.interface == "mcp":
        raise NotPermitted(f"{what} is not for an agent's tools: the person runs"
                           " `memoryd forget --all --yes`")
    if not confirmed:
        raise BadRequest(f"{what} deletes every memory: send \"confirm\":"
                         f" \"{CONFIRM_EVERYTHING}\" (the command line's --yes)")
