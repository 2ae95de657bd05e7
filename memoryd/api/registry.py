"""The API's operations in one registry (`OPERATIONS`, by the name in `POST /v1/<name>`),
and `MemoryOps`, which runs each: its JSON made into a typed request (`parse`), the
domain called (`memoryd.domain`), a refusal given its HTTP status, and the audit record
(`store/audit.py`).

The daemon serves these on its socket (`api.server`); when no daemon runs, the
same object is built over stores opened directly (`client.direct_ops`), so a hook,
the MCP server and the CLI behave the same either way. Results are plain JSON values.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiosqlite
import structlog

from memoryd.api import parse
from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.domain.assembly import Domain
from memoryd.domain.core import Runtime
from memoryd.errors import (
    ApiError,
    BadRequest,
    Conflict,
    MemorydError,
    NotFound,
    NotPermitted,
    NotSupported,
    Refused,
)
from memoryd.memory import MemoryBackend
from memoryd.memory.opening import memory_user
from memoryd.memory.privacy.redaction import shown
from memoryd.store import audit

log = structlog.get_logger("memoryd.api")

#: How much of a caller-supplied id, and of a failure's reason, the audit trail keeps.
AUDIT_FIELD_CHARS, AUDIT_DETAIL_CHARS = 200, 500
#: The HTTP status of each refusal the domain makes.
REFUSAL_STATUS: dict[type[Refused], int] = {
    BadRequest: 400, NotPermitted: 403, NotFound: 404, Conflict: 409, NotSupported: 501}


def status_of(refusal: Refused) -> int:
    return next((status for kind, status in REFUSAL_STATUS.items()
                 if isinstance(refusal, kind)), 400)


class MemoryOps:
    """Every operation, over the daemon's store connection and a memory backend, with
    its audit record."""

    def __init__(self, settings: Settings, clock: Clock, conn: aiosqlite.Connection,
                 backend: MemoryBackend, runtime: Runtime) -> None:
        self.settings = settings
        self.clock = clock
        self.domain = Domain(settings, clock, conn, backend, runtime)

    @property
    def store(self) -> aiosqlite.Connection:
        """The daemon's store connection (the viewer's read-only queries)."""
        return self.domain.core.conn

    @property
    def memory(self) -> MemoryBackend:
        return self.domain.core.backend

    async def run(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Operation `name` with its audit record (`store/audit.py`), whatever its outcome."""
        operation = OPERATIONS.get(name)
        if operation is None:
            raise ApiError(404, f"no operation {name!r}")
        try:
            self._same_user(args)
            request = operation.parse(args, self.clock.now())
            result = await operation.call(self.domain, request)
        except Refused as exc:
            await self._audit(name, args, None, failure=str(exc))
            raise ApiError(status_of(exc), str(exc)) from None
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
            raise NotPermitted(f"this memoryd keeps the memories of user"
                               f" {memory_user(self.settings)!r}, not {asking!r}")

    async def _audit(self, name: str, args: Mapping[str, Any], result: dict[str, Any] | None,
                     *, failure: str | None = None) -> None:
        masks = self.settings.extra_masks()

        def kept(value: str | None, limit: int = AUDIT_FIELD_CHARS) -> str | None:
            # A caller may put anything in an id (a token pasted in the wrong place):
            # the trail keeps it masked like memory text, and bounded.
            if value is None:
                return None
            value = shown(" ".join(value.split()), masks)
            return value if len(value) <= limit else value[: limit - 1] + "…"

        def text(key: str) -> str | None:
            value = args.get(key)
            return kept(value) if isinstance(value, str) and value else None

        ids, count = audit.ids_in(result)
        if text("memory_id") is not None:
            ids = (text("memory_id") or "", *ids)
        action = name if name != "session_event" else f"session_event:{text('event')}"
        if name == "retention" and args.get("dry_run") is True:
            # What a dry run would delete is not deleted: recorded as such, counts only.
            action, ids = "retention_dry_run", ()
        event = audit.AuditEvent(
            interface=text("interface") or "api", action=action,
            outcome="failed" if failure is not None else "ok", agent=text("agent"),
            agent_session_id=text("agent_session_id") or text("session_id"),
            memory_ids=ids, count=count, detail=kept(failure, AUDIT_DETAIL_CHARS))
        core = self.domain.core
        try:
            async with core.writing:
                await audit.record(core.conn, event, self.clock.now())
        except MemorydError as exc:
            # The operation stands; only its record is lost (said in the log).
            log.warning("audit_not_recorded", action=action, error=str(exc))


@dataclass(frozen=True)
class Operation:
    """One operation: its JSON made into a request, and the domain's call for it."""

    parse: parse.Parser
    call: Callable[[Domain, Any], Awaitable[dict[str, Any]]]


#: What the API serves, by the name in `POST /v1/<name>`.
OPERATIONS: dict[str, Operation] = {
    "recall": Operation(parse.recall, lambda d, r: d.memories.recall(r)),
    "recall_temporal": Operation(parse.recall_temporal, lambda d, r: d.memories.recall(r)),
    "context": Operation(parse.context, lambda d, r: d.memories.context(r)),
    "remember": Operation(parse.remember, lambda d, r: d.memories.remember(r)),
    "correct": Operation(parse.correct, lambda d, r: d.memories.correct(r)),
    "forget": Operation(parse.forget, lambda d, r: d.memories.forget(r)),
    "retention": Operation(parse.retention, lambda d, r: d.governance.retention(r)),
    "forget_user": Operation(parse.forget_user, lambda d, r: d.governance.forget_user(r)),
    "hold": Operation(parse.hold, lambda d, r: d.governance.hold(r)),
    "holds": Operation(parse.nothing, lambda d, _r: d.governance.list_holds()),
    "release_hold": Operation(parse.hold_id, lambda d, r: d.governance.release_hold(r)),
    "transcripts": Operation(parse.transcripts, lambda d, r: d.governance.transcripts(r)),
    "get_memory": Operation(parse.get_memory, lambda d, r: d.memories.get(r)),
    "link_project": Operation(parse.link, lambda d, r: d.governance.link_project(r)),
    "project_links": Operation(parse.nothing, lambda d, _r: d.governance.project_links()),
    "unlink_project": Operation(parse.old_path, lambda d, r: d.governance.unlink_project(r)),
    "search_sessions": Operation(parse.search_sessions, lambda d, r: d.sessions.search(r)),
    "list_sessions": Operation(parse.list_sessions, lambda d, r: d.sessions.listing(r)),
    "sync": Operation(parse.session, lambda d, r: d.sessions.sync(r)),
    "session_event": Operation(parse.session_event, lambda d, r: d.sessions.event(r)),
    "briefing": Operation(parse.briefing, lambda d, r: d.sessions.briefing(r)),
    "open_ui": Operation(parse.nothing, lambda d, _r: d.sessions.open_ui()),
}
