"""What a person decides about what memoryd keeps (`Governance`): forgetting a user,
retention, the raw archive, legal holds, project links."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

import structlog

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.domain.core import Core, refuse_everything_from_tools
from memoryd.domain.requests import (
    ForgetUserRequest,
    HoldRequest,
    LinkRequest,
    RetentionRequest,
    TranscriptsRequest,
)
from memoryd.errors import BadRequest, Conflict, NotFound
from memoryd.lifecycle.retention import Retention
from memoryd.memory import Capability
from memoryd.memory.opening import opener, owner_user
from memoryd.memory.privacy.redaction import shown
from memoryd.memory.protocol import ProjectRelabel, Relabelled
from memoryd.store import forgotten, holds, links, queries, raw, transcripts

log = structlog.get_logger("memoryd.domain")


class Governance:
    """Forgetting a user, retention, the raw archive, legal holds, project links."""

    def __init__(self, core: Core) -> None:
        self._core = core

    async def forget_user(self, request: ForgetUserRequest) -> dict[str, Any]:
        """Everything about a user, deleted for good (the right to be forgotten): their
        memories in every layer (with vectors), saves still waiting in the outbox, and,
        when they are this daemon's user, the text of the raw archive. Counts only."""
        core, user = self._core, request.user
        refuse_everything_from_tools(request.caller, request.confirmed,
                                     "forgetting everything about a user")
        if await holds.standing(core.conn):
            raise Conflict("legal holds stand (`memoryd hold list`): forgetting"
                           " everything would delete what they keep")
        report: dict[str, Any] = {"user": user, "forgotten": 0, "outbox_saves_dropped": 0,
                                  "archive": None}
        if user != owner_user(core.settings):
            # Only a shared PostgreSQL layer keeps other users' memories; the others hold
            # this daemon's user's alone.
            if "postgres" in core.settings.memory.backends:
                report["forgotten"] = await _forget_other_user(core.settings, core.clock,
                                                               user)
            return report
        # The archive first: a sync running meanwhile then finds no text left to save. What
        # it held is remembered as forgotten first, so a copy written later stays out.
        async with core.writing:
            await forgotten.remember_forgotten(core.conn, core.clock.now(), everything=True)
            report["archive"] = await raw.clear_everything(core.conn, core.clock.now())
        outbox = getattr(core.backend, "outbox", None)
        if outbox is not None:
            report["outbox_saves_dropped"] = await outbox.purge_saves()
        report["forgotten"] = await core.backend.forget_where(all=True, hard=True)
        return core.noting_copies(report, Capability.FORGET)

    async def retention(self, request: RetentionRequest) -> dict[str, Any]:
        """Apply the retention settings now (`dry_run`: only say what would go)."""
        core = self._core
        job = Retention(core.conn, core.backend, core.clock, core.settings.retention)
        async with core.writing:  # recorded in the audit trail by the API, like any request
            report = await job.run(dry_run=request.dry_run, audit_as=None,
                                   trust_clock=request.trust_clock)
        return report.as_dict()

    async def transcripts(self, request: TranscriptsRequest) -> dict[str, Any]:
        """The raw archive's lifecycle (`store/transcripts.py`) for the sessions chosen by
        `session`, `project` and/or `older_than` (seconds): `archive`, `mask` or
        `delete_raw`. Sessions under a legal hold are left as they are (and counted) by
        `mask` and `delete_raw`; memories derived from the sessions are listed, never
        deleted."""
        core = self._core
        action, session, project = request.action, request.session, request.project
        if session is None and project is None and request.older_than is None:
            raise BadRequest("choose sessions: a session, a project and/or an age")
        session_id = None
        if session is not None:
            found = await queries.find_session(core.conn, session)
            if found is None:
                raise NotFound(f"no session matches {session[:80]!r}")
            session_id = int(found["id"])
        before = (None if request.older_than is None
                  else core.clock.now() - timedelta(seconds=request.older_than))
        chosen = await transcripts.select_sessions(core.conn, session_id=session_id,
                                                   project=project, before=before)
        held = await holds.standing(core.conn)
        report: dict[str, Any] = {"action": action, "sessions": len(chosen), "held": 0,
                                  "messages": 0, "not_in_memory_yet": 0, "files": []}
        if action != "archive":
            kept = [s for s in chosen if held.covers(
                project=s["project"], session_id=s["id"], session_external_id=s["external_id"])]
            report["held"] = len(kept)
            chosen = [s for s in chosen if s not in kept]
        ids = [int(s["id"]) for s in chosen]
        async with core.writing:
            if action == "archive":
                directory = core.settings.state_dir / "archive"
                for chosen_session in chosen:
                    path, lines = await transcripts.archive_session(
                        core.conn, chosen_session, directory)
                    report["files"].append(str(path))
                    report["messages"] += lines
            elif action == "mask":
                masks = core.settings.extra_masks()
                report["messages"] = await transcripts.mask_messages(
                    core.conn, ids, lambda text: shown(text, masks))
            else:
                report["messages"], report["not_in_memory_yet"] = (
                    await transcripts.clear_messages(core.conn, ids))
        report["memory_ids"] = await self._derived(ids)
        return report

    async def _derived(self, session_ids: list[int]) -> list[str]:
        """The memories saved from these sessions (listed for a person to decide)."""
        backend = self._core.backend
        wanted = set(session_ids)
        if not wanted or Capability.EXPORT not in backend.capabilities:
            return []
        found = []
        async for record in backend.export():
            if (record.get("provenance") or {}).get("session_id") in wanted:
                found.append(record["id"])
        return found

    async def hold(self, request: HoldRequest) -> dict[str, Any]:
        """Place a legal hold on a project or a session: no deletion touches it."""
        core = self._core
        project, session = request.project, request.session
        if (project is None) == (session is None):
            raise BadRequest("give a project or a session to hold")
        session_id = None
        if session is not None:
            found = await queries.find_session(core.conn, session)
            if found is not None:
                session_id = int(found["id"])
                session = found.get("external_id") or session
        kind, value = ("project", project) if project is not None else ("session", session)
        assert value is not None
        async with core.writing:
            hold_id, created = await holds.place(
                core.conn, kind=kind, value=value, session_id=session_id,
                reason=shown(request.reason, core.settings.extra_masks()) or None,
                now=core.clock.now())
        return {"hold": hold_id, "kind": kind, "value": value, "created": created}

    async def list_holds(self) -> dict[str, Any]:
        return {"holds": await holds.listing(self._core.conn)}

    async def release_hold(self, hold_id: int) -> dict[str, Any]:
        core = self._core
        async with core.writing:
            released = await holds.release(core.conn, hold_id)
        if released is None:
            raise NotFound(f"no legal hold {hold_id} (see `memoryd hold list`)")
        return {"released": released}

    async def link_project(self, request: LinkRequest) -> dict[str, Any]:
        """Link a renamed folder's old path to its new one and move what memory holds."""
        core, old, new = self._core, request.old, request.new
        try:
            async with core.writing:
                sessions = await links.link(core.conn, old, new, core.clock.now())
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        done = (await core.backend.relabel_project(old, new)
                if isinstance(core.backend, ProjectRelabel)
                else Relabelled(0, (core.backend.name,)))
        return {"old": old, "new": new, "sessions_moved": sessions,
                "memories_moved": done.moved,
                **({"unmoved_in": list(done.unmoved)} if done.unmoved else {})}

    async def project_links(self) -> dict[str, Any]:
        return {"links": [asdict(link) for link in await links.all_links(self._core.conn)]}

    async def unlink_project(self, old: str) -> dict[str, Any]:
        core = self._core
        async with core.writing:
            removed = await links.unlink(core.conn, old)
        if not removed:
            raise NotFound(f"{old} is not linked (see `memoryd project links`)")
        return {"unlinked": old}


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
