"""Memory rebuilt from the messages memoryd holds (`memoryd rebuild-memory`).

The embedded memory (`memory.db`) is derived: every conversation segment, digest and
summary in it was saved from `memoryd.db`'s messages, and `sessions.memory_sync_index`
says how far. When memory.db is damaged, missing or empty, those indexes still say
"saved", so a plain `memoryd sync` saves nothing. A rebuild:

1. reads what still reads of the old file (`sqlite.salvage`), writes it beside the file as
   `<memory.db>.damaged-<time>.jsonl`, and moves the old file aside;
2. sets every session's progress back to its start (`store.sessions.reset_memory_progress`)
   and saves every message again into a new store (a session's segments by deterministic
   ids, so a second run stores nothing twice); nothing is sent to a model again;
3. imports from the salvage what no message can give again: facts remembered by hand,
   corrections, distilled observations, and conversations whose messages retention has
   since cleared (a conversation whose range the new segments cover is left out).

Forgotten content stays forgotten: the daemon's archive remembers it (`store.forgotten`).
`lifecycle.coverage` tells a memory.db that lost what the archive says it holds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.files import atomic_writer
from memoryd.lifecycle.recovery import Recovery, SyncReport
from memoryd.lifecycle.rerender import NAME as RERENDER
from memoryd.lifecycle.sync_policy import recovery_policy
from memoryd.memory.backends.sqlite.salvage import move_aside, readable_memories
from memoryd.memory.opening import open_memory_backend
from memoryd.memory.protocol import MemoryBackend, MemoryBrowse
from memoryd.store import upgrades
from memoryd.store.database import open_store
from memoryd.store.sessions import reset_memory_progress

log = structlog.get_logger(__name__)

#: The `upgrades` row of a rebuild: started, then done (a rebuild cut short goes on).
NAME = "memory_rebuild"
#: Memories a new store makes again from the messages.
_MADE_AGAIN = frozenset({"session_digest", "session_summary"})


@dataclass(frozen=True, slots=True)
class RebuildReport:
    salvaged: int
    unreadable: int
    moved_to: str | None
    sync: SyncReport
    imported: int

    def as_dict(self) -> dict[str, Any]:
        return {"salvaged": self.salvaged, "unreadable": self.unreadable,
                "moved_to": self.moved_to, "sync": dataclasses.asdict(self.sync),
                "imported": self.imported}


def _covered(salvaged: Mapping[str, Any], live: dict[int, list[tuple[int, int]]]) -> bool:
    provenance = salvaged.get("provenance") or {}
    session, first = provenance.get("session_id"), provenance.get("first_index")
    if session is None or first is None:
        return False
    last = provenance.get("last_index", first)
    return any(a <= last and first <= b for a, b in live.get(int(session), []))


async def _import_uncovered(backend: MemoryBackend, records: list[dict[str, Any]]) -> int:
    live: dict[int, list[tuple[int, int]]] = {}
    kept = []
    for record in records:
        if record.get("type") in _MADE_AGAIN:
            continue
        session = (record.get("provenance") or {}).get("session_id")
        if record.get("type") == "conversation" and session is not None and isinstance(
                backend, MemoryBrowse):
            if int(session) not in live:
                live[int(session)] = [
                    (m.provenance.first_index, m.provenance.last_index
                     if m.provenance.last_index is not None else m.provenance.first_index)
                    for m in await backend.session_memories(int(session))
                    if m.deleted_at is None and m.superseded_by is None
                    and m.provenance.first_index is not None]
            if _covered(record, live):
                continue
        kept.append(record)
    return await backend.import_records(kept) if kept else 0


async def rebuild_memory(settings: Settings, clock: Clock) -> RebuildReport:
    """Save every message memoryd holds into a new embedded memory (see the module)."""
    path = settings.memory_path
    async with open_store(settings) as conn:
        progress = await upgrades.progress(conn, NAME)
        resuming = progress.started and not progress.done
        salvage_file = None
        salvaged, unreadable, moved = [], 0, None
        log.info("memory_rebuild_started", path=str(path), resuming=resuming)
        if not resuming:
            found = readable_memories(path)
            salvaged, unreadable = found.records, found.unreadable
            moved = move_aside(path, clock.now())
            if moved is not None:
                salvage_file = Path(f"{moved}.jsonl")
                with atomic_writer(salvage_file) as handle:
                    for record in salvaged:
                        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            await upgrades.restart(conn, NAME, clock.now())
            await reset_memory_progress(conn)
            await upgrades.advance(conn, RERENDER, 0, 0, clock.now(), done=True)
        else:
            salvage_file = _latest_salvage(path)
            if salvage_file is not None:
                salvaged = [json.loads(line) for line in
                            salvage_file.read_text(encoding="utf-8").splitlines() if line]
        backend = await open_memory_backend(settings, clock)
        try:
            # Nothing is sent to a model again: what it distilled is in the salvage.
            policy = dataclasses.replace(recovery_policy(settings), distills=None)
            report = await Recovery(conn, backend, clock, policy).run(force=True)
            imported = await _import_uncovered(backend, salvaged)
        finally:
            await backend.close()
        await upgrades.advance(conn, NAME, 1, imported, clock.now(), done=True)
    log.info("memory_rebuild_finished", path=str(path), salvaged=len(salvaged),
             unreadable=unreadable, segments=report.segments_saved, imported=imported)
    return RebuildReport(len(salvaged), unreadable, str(moved) if moved else None, report,
                         imported)


def _latest_salvage(path: Path) -> Path | None:
    """The salvage a rebuild cut short wrote (the names sort by time)."""
    found = sorted(path.parent.glob(f"{path.name}.damaged-*.jsonl"))
    return found[-1] if found else None
