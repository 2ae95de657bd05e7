"""`memoryd sync`: every unsynced message (of one session, if named) saved to memory now."""

from __future__ import annotations

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.lifecycle.coverage import check_memory
from memoryd.lifecycle.recovery import Recovery, SyncReport
from memoryd.lifecycle.sync_policy import recovery_policy
from memoryd.memory.opening import open_memory_backend
from memoryd.store import queries
from memoryd.store.database import open_store


async def sync_now(settings: Settings, clock: Clock, session: str | None) -> SyncReport | None:
    """`memoryd sync`: save every unsynced message (of one session, if named) now.

    None when `session` matches no session. Safe beside a running daemon: both
    save segments by deterministic id and advance the index by compare-and-set.
    """
    async with open_store(settings) as conn:
        session_id = None
        if session is not None:
            found = await queries.find_session(conn, session)
            if found is None:
                return None
            session_id = int(found["id"])
        await check_memory(conn, settings)
        backend = await open_memory_backend(settings, clock)
        try:
            recovery = Recovery(conn, backend, clock, recovery_policy(settings))
            return await recovery.run(force=True, session_id=session_id)
        finally:
            await backend.close()
