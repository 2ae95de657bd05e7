"""Whether the wall clock may be trusted to delete by age.

Retention deletes what is older than a period, and audit expiry what is older than a
year: both read the wall clock, which a person, a VM restored from a snapshot or a bad
NTP answer can set forward by a year in one step. Each time deletions by age run, the
wall clock and the boot clock (`Clock.boot`: the seconds since boot, suspended time
counted, which no one sets) are marked. A later run trusts the wall clock only when it
moved as the boot clock did since the mark (within a day), or, in another boot, when it
is within 30 days of the mark (before the first mark: of the latest conversation
stored). Otherwise nothing is deleted by age until the person says
the clock is right (`memoryd retention --trust-clock`), and `doctor` says why.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta

import aiosqlite

from memoryd.clock import BootReading, Clock, utc_text
from memoryd.memory.export_format import from_utc_text
from memoryd.store.connection import transaction

#: The mark deletions by age share.
NAME = "deletions_by_age"
#: How far the wall clock may run ahead of the boot clock within one boot (NTP
#: corrections are seconds; a day leaves room for a clock set by hand to the right zone).
MAX_STEP_IN_BOOT = timedelta(days=1)
#: How long a machine may be off, or memoryd not run, before a later time is doubted.
MAX_GAP_ACROSS_BOOTS = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class Mark:
    wall: datetime
    boot: BootReading


async def read_mark(conn: aiosqlite.Connection, name: str = NAME) -> Mark | None:
    try:
        async with conn.execute("SELECT wall, boot_id, boot_seconds FROM clock_marks"
                                " WHERE name = ?", (name,)) as cursor:
            row = await cursor.fetchone()
    except sqlite3.OperationalError:
        return None  # a store read-only before its migration made the table
    if row is None:
        return None
    return Mark(from_utc_text(row[0]), BootReading(row[1], row[2]))


async def write_mark(conn: aiosqlite.Connection, now: datetime, boot: BootReading,
                     name: str = NAME) -> None:
    async with transaction(conn):
        await conn.execute(
            "INSERT INTO clock_marks (name, wall, boot_id, boot_seconds) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET wall = excluded.wall,"
            " boot_id = excluded.boot_id, boot_seconds = excluded.boot_seconds",
            (name, utc_text(now), boot.boot_id, boot.seconds))


def ahead(mark: Mark | None, now: datetime, boot: BootReading) -> timedelta | None:
    """How far the wall clock is ahead of what the mark and the time since explain; None
    when it may be trusted."""
    if mark is None:
        return None
    then = mark.boot
    if (then.boot_id is not None and then.boot_id == boot.boot_id
            and then.seconds is not None and boot.seconds is not None):
        gap = now - (mark.wall + timedelta(seconds=boot.seconds - then.seconds))
        return gap if gap > MAX_STEP_IN_BOOT else None
    gap = now - mark.wall
    return gap if gap > MAX_GAP_ACROSS_BOOTS else None


async def clock_ahead(conn: aiosqlite.Connection, clock: Clock, *,
                      trust: bool = False, mark: bool = True) -> timedelta | None:
    """None when deletions by age may run now (the mark then moves to now, unless not
    `mark`: a dry run); else how far the clock seems ahead. `trust`: the person said
    the clock is right."""
    now, boot = clock.now(), clock.boot()
    found = None if trust else ahead(await read_mark(conn) or await _newest_seen(conn),
                                     now, boot)
    if found is None and mark:
        await write_mark(conn, now, boot)
    return found


async def _newest_seen(conn: aiosqlite.Connection) -> Mark | None:
    """Before any mark: the latest time a stored conversation speaks of, as if marked in
    another boot."""
    async with conn.execute("SELECT MAX(last_message_at) FROM sessions") as cursor:
        row = await cursor.fetchone()
    if row is None or not row[0]:
        return None
    return Mark(from_utc_text(row[0]), BootReading(None, None))


def say(gap: timedelta) -> str:
    days = gap.total_seconds() / 86400
    return (f"the clock reads {days:.0f} days later than the time since memoryd last"
            " deleted by age explains: nothing is deleted by age until you say it is right"
            " (`memoryd retention --trust-clock`)")
