"""Governance: forgetting a user, retention, the raw archive, legal holds, project links."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import structlog

from memoryd.api import args as arg
from memoryd.api.shared import OpsBase
from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.errors import ApiError
from memoryd.lifecycle.retention import Retention
from memoryd.memory import Capability
from memoryd.memory.opening import opener, owner_user
from memoryd.memory.privacy.redaction import shown
from memoryd.memory.protocol import ProjectRelabel, Relabelled
from memoryd.names import project_path
from memoryd.store import forgotten, holds, links, queries, raw, transcripts

log = structlog.get_logger("memoryd.api")


class Governance(OpsBase):
    """What a person decides about what memoryd keeps."""

    async def forget_user(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Everything about a user, deleted for good (the right to be forgotten): their
        memories in every layer (with vectors), saves still waiting in the outbox, and,
        when they are this daemon's user, the text of the raw archive. Counts only."""
        user = arg.text(args, "user")
        arg.confirmed_everything(args, "forgetting everything about a user")
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
        # The archive first: a sync running meanwhile then finds no text left to save. What
        # it held is remembered as forgotten first, so a copy written later stays out.
        async with self._writing:
            await forgotten.remember_forgotten(self._conn, self.clock.now(), everything=True)
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
            report = await job.run(dry_run=dry_run, audit_as=None,
                                   trust_clock=arg.flag(args, "trust_clock"))
        return report.as_dict()

    async def transcripts(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The raw archive's lifecycle (`store/transcripts.py`) for the sessions chosen by
        `session`, `project` and/or `older_than` (seconds): `archive`, `mask` or
        `delete_raw`. Sessions under a legal hold are left as they are (and counted) by
        `mask` and `delete_raw`; memories derived from the sessions are listed, never
        deleted."""
        action = arg.text(args, "action")
        if action not in ("archive", "mask", "delete_raw"):
            raise ApiError(400, "action must be archive, mask or delete_raw")
        session, project = arg.opt_text(args, "session"), arg.project(args)
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
                    self._conn, ids, lambda text: shown(text, masks))
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
        project, session = arg.project(args), arg.opt_text(args, "session")
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
                reason=shown(arg.opt_text(args, "reason"), self.settings.extra_masks())
                or None, now=self.clock.now())
        return {"hold": hold_id, "kind": kind, "value": value, "created": created}

    async def list_holds(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"holds": await holds.listing(self._conn)}

    async def release_hold(self, args: Mapping[str, Any]) -> dict[str, Any]:
        hold_id = arg.integer(args, "hold", 0, 1, 2**62)
        async with self._writing:
            released = await holds.release(self._conn, hold_id)
        if released is None:
            raise ApiError(404, f"no legal hold {hold_id} (see `memoryd hold list`)")
        return {"released": released}

    async def link_project(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Link a renamed folder's old path to its new one and move what memory holds."""
        old, new = project_path(arg.text(args, "old")), project_path(arg.text(args, "new"))
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
        old = project_path(arg.text(args, "old"))
        async with self._writing:
            removed = await links.unlink(self._conn, old)
        if not removed:
            raise ApiError(404, f"{old} is not linked (see `memoryd project links`)")
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
