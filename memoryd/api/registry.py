"""The API's operations in one registry (`OPERATIONS`, by the name in `POST /v1/<name>`),
and `MemoryOps`, which runs each with its audit record (`store/audit.py`).

The daemon serves these on its socket (`api.server`); when no daemon runs, the
same object is built over stores opened directly (`client.direct_ops`), so a hook,
the MCP server and the CLI behave the same either way. `MemoryOps` is assembled
from its groups: `ops` (memory), `governance`, `events` (sessions and the hooks'
events), over `base.OpsBase`; arguments are checked in `args`. Results are plain
JSON values.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from memoryd.api.events import SessionEvents
from memoryd.api.governance import Governance
from memoryd.api.memory_ops import MemoryOperations
from memoryd.errors import ApiError, MemorydError
from memoryd.memory.opening import memory_user
from memoryd.memory.privacy.redaction import shown
from memoryd.store import audit

log = structlog.get_logger("memoryd.api")

#: How much of a caller-supplied id, and of a failure's reason, the audit trail keeps.
AUDIT_FIELD_CHARS, AUDIT_DETAIL_CHARS = 200, 500


class MemoryOps(MemoryOperations, Governance, SessionEvents):
    """Every operation, over the daemon's store connection and a memory backend, with
    its audit record."""

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
        try:
            async with self._writing:
                await audit.record(self._conn, event, self.clock.now())
        except MemorydError as exc:
            # The operation stands; only its record is lost (said in the log).
            log.warning("audit_not_recorded", action=action, error=str(exc))


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
    "briefing": MemoryOps.briefing,
    "open_ui": MemoryOps.open_ui,
}
