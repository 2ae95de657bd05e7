"""Stale sessions: no new message for `stale_session_timeout` means `paused`.

The decision is a pure function of UTC instants (`now` is passed in), so it
behaves the same under any local time zone; a new message makes a session
`active` again (the store does that when it commits the message).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.store import sessions as store

log = structlog.get_logger("memoryd.lifecycle")


def is_stale(last_activity: datetime | None, now: datetime, timeout: timedelta) -> bool:
    """True when a session last active at `last_activity` should be paused at `now`."""
    if last_activity is None:
        return True
    return now - last_activity >= timeout


def stale_cutoff(now: datetime, timeout: timedelta) -> datetime:
    """Sessions whose last activity is before this instant are stale."""
    return now - timeout


def shown_as_of(now: datetime, stale_session_timeout: float) -> datetime:
    """The cutoff with which statuses are shown (`queries.list_sessions(stale_before=)`):
    what the daemon's lifecycle check would make of them now, daemon or not."""
    return stale_cutoff(now, timedelta(seconds=stale_session_timeout))


async def expire_stale_sessions(
    conn: aiosqlite.Connection, clock: Clock, stale_after: timedelta
) -> list[int]:
    """Pause every active session quiet for `stale_after`; returns their ids."""
    paused = await store.pause_stale(conn, stale_cutoff(clock.now(), stale_after))
    if paused:
        log.info("sessions_paused", count=len(paused), session_ids=paused[:20])
    return paused
