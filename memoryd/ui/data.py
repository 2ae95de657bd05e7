"""What the viewer's pages show, read through the same operations as the CLI.

Searches, corrections, forgets and hand-added facts go through `MemoryOps` (the
daemon's API operations, with the interface `ui` in the audit trail); the rest
are read-only queries on the daemon's store and, where a backend can browse
(`MemoryBrowse`), on memory. Every text shown is masked as `show --view person`
masks it: secrets, personal data and the configured extra patterns.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import aiosqlite

from memoryd.api.registry import MemoryOps
from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.errors import MemorydError
from memoryd.lifecycle.expiry import shown_as_of
from memoryd.memory.export_format import memory_to_record
from memoryd.memory.models import Memory
from memoryd.memory.privacy.redaction import readable_stored, shown
from memoryd.memory.protocol import MemoryBrowse
from memoryd.store import audit, queries
from memoryd.store.injections import injections_for, recent_injections

#: Messages of a session shown per page (a 10,000-message session is read page by page).
PAGE_MESSAGES = 200
#: Characters of a message shown before the rest is folded.
FOLD_CHARS = 1200
#: Sessions on the sessions page, newest first.
SESSIONS_SHOWN = 300
CHART_DAYS = 30
#: The chart's counts are kept this long (seconds): they scan a month of messages.
CHART_TTL = 300.0

OpsProvider = Callable[[], Awaitable[MemoryOps]]
StatusProvider = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Chart:
    days: list[str]
    #: project -> messages per day (aligned with `days`), and the same for memories.
    messages: dict[str, list[int]]
    memories: dict[str, list[int]]


class ViewerData:
    """The viewer's reads and writes, over the daemon's operations and its store."""

    def __init__(self, settings: Settings, clock: Clock, ops: OpsProvider,
                 status: StatusProvider) -> None:
        self.settings = settings
        self._clock = clock
        self._ops = ops
        self._status = status
        self._masks = settings.extra_masks()
        self._chart: tuple[float, Chart] | None = None

    def masked(self, text: str | None) -> str:
        return shown(text, self._masks)

    async def _conn(self) -> aiosqlite.Connection:
        return (await self._ops()).store

    async def call(self, operation: str, args: dict[str, Any]) -> dict[str, Any]:
        """One operation, as the CLI would run it, recorded as coming from the viewer."""
        return await (await self._ops()).run(operation, {"interface": "ui", **args})

    # -- pages -----------------------------------------------------------------------

    async def overview(self) -> dict[str, Any]:
        return await self._status()

    async def sessions(self) -> list[tuple[str, list[dict[str, Any]]]]:
        """The newest sessions grouped by project (the most recently active project first)."""
        rows = queries.nest_subagents(await queries.recent_sessions(
            await self._conn(), SESSIONS_SHOWN,
            shown_as_of(self._clock.now(), self.settings.stale_session_timeout)))
        by_project: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            row["summary_markdown"] = self.masked(row.get("summary_markdown"))
            by_project.setdefault(row["project"] or "(no project)", []).append(row)
        return list(by_project.items())

    async def session(self, ref: str, offset: int) -> dict[str, Any] | None:
        conn = await self._conn()
        found = await queries.find_session(conn, ref, shown_as_of(
            self._clock.now(), self.settings.stale_session_timeout))
        if found is None:
            return None
        messages = await queries.session_messages(conn, found["id"], limit=PAGE_MESSAGES,
                                                  offset=offset)
        memories = await self._session_memories(int(found["id"]))
        for message in messages:
            index = message["message_index"]
            text = self.masked(readable_stored(message["content"], message["kind"]))
            message["text"] = text
            message["folded"] = len(text) > FOLD_CHARS
            message["tool_input"] = self.masked(
                readable_stored(message.get("tool_input") or "", "tool_input"))
            message["memories"] = [
                m for m in memories
                if (m["first_index"] is not None and m["last_index"] is not None
                    and m["first_index"] <= index <= m["last_index"])]
        found["summary_markdown"] = self.masked(found.get("summary_markdown"))
        found["messages"] = messages
        found["offset"] = offset
        found["page"] = PAGE_MESSAGES
        found["memories"] = memories
        found["given"] = await injections_for(conn, [found["external_id"]])
        return found

    async def _session_memories(self, session_id: int) -> list[dict[str, Any]]:
        backend = (await self._ops()).memory
        if not isinstance(backend, MemoryBrowse):
            return []
        try:
            found = await backend.session_memories(session_id)
        except MemorydError:
            return []
        return [_brief(m) for m in found]

    async def search(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        results = (await self.call("recall", args))["results"]
        for result in results:
            result["shown"] = result.get("excerpt") or result["content"]
        return results  # type: ignore[no-any-return]

    async def memory(self, memory_id: str) -> dict[str, Any]:
        return await self.call("get_memory", {"memory_id": memory_id, "record_use": False})

    async def memory_events(self, memory_id: str) -> list[dict[str, Any]]:
        """The newest audit records naming this memory, newest first."""
        found = await audit.events(await self._conn(), memory_id=memory_id, limit=20)
        return list(reversed(found))

    async def activity(self) -> dict[str, Any]:
        conn = await self._conn()
        return {"given": await recent_injections(conn, 200),
                "audit": list(reversed(await audit.events(conn, limit=200)))}

    async def chart(self) -> Chart:
        """Messages and memories per day per project over the last CHART_DAYS days."""
        cached = self._chart
        if cached is not None and time.monotonic() - cached[0] < CHART_TTL:
            return cached[1]
        today = self._clock.now().date()
        first = today - timedelta(days=CHART_DAYS - 1)
        days = [(first + timedelta(days=i)).isoformat() for i in range(CHART_DAYS)]
        since = datetime.combine(first, datetime.min.time(), tzinfo=self._clock.now().tzinfo)
        messages = _series(days, await queries.messages_per_day(await self._conn(),
                                                                 days[0]))
        backend = (await self._ops()).memory
        memory_counts: list[tuple[str, str | None, int]] = []
        if isinstance(backend, MemoryBrowse):
            try:
                memory_counts = await backend.daily_counts(since)
            except MemorydError:
                memory_counts = []
        chart = Chart(days, messages, _series(days, memory_counts))
        self._chart = (time.monotonic(), chart)
        return chart


def _brief(memory: Memory) -> dict[str, Any]:
    record = memory_to_record(memory)
    p = memory.provenance
    record["first_index"], record["last_index"] = p.first_index, p.last_index
    record["live"] = memory.is_live
    return record


def _series(days: list[str], counts: list[tuple[str, str | None, int]]) -> dict[str, list[int]]:
    position = {day: i for i, day in enumerate(days)}
    series: dict[str, list[int]] = {}
    for day, project, n in counts:
        if day in position:
            series.setdefault(project or "(no project)", [0] * len(days))[position[day]] += n
    return series
