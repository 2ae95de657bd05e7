"""`memoryd ingest --once`: one full pass over every transcript, then exit.

Kept apart from the service so that the command imports only what ingestion needs.
"""

from __future__ import annotations

from collections.abc import Callable

from memoryd.clock import Clock
from memoryd.config import Settings, SourceKind
from memoryd.ingest.ingester import Ingester, PassStats
from memoryd.lock import hold_lock
from memoryd.store.database import open_store


async def ingest_once(
    settings: Settings,
    clock: Clock,
    *,
    on_total: Callable[[int], None] | None = None,
    progress: Callable[[int], None] | None = None,
    extra: tuple[tuple[str, SourceKind], ...] = (),
) -> PassStats:
    """One full pass over every source (and `extra` transcripts), under the lock;
    the daemon's `ingest --once`."""
    with hold_lock(settings, "ingest", clock.now()):
        async with open_store(settings) as conn:
            ingester = Ingester(conn, settings, clock)
            await ingester.load()
            for path, kind in extra:
                ingester.follow(path, kind)
            await ingester.scan()
            if on_total is not None:
                on_total(ingester.pending_bytes())
            stats = await ingester.run_once(progress=progress)
            await ingester.settle()
            return stats
