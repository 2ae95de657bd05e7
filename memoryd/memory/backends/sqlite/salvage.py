"""What still reads of a damaged embedded memory (`memory.db`), row by row.

A damaged page makes every query that crosses it fail ("database disk image is malformed"),
so an export that pages through an index loses everything after the first bad page, and
opening the store for writing fails before it reads a row. Here the file is opened
read-only and the `memories` table read by its rowid (`seq`), each row on its own, without
an index: a row whose page is ruined is skipped and counted; every other row is kept.
SQLite's own `.recover` needs a build with `sqlite_dbpage`, which Debian's is not.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from memoryd.memory.backends.sqlite.rows import row_memory
from memoryd.memory.export_format import memory_to_record
from memoryd.sqlite import Kind, kind_of, opened

log = structlog.get_logger(__name__)

_ONE = "SELECT * FROM memories NOT INDEXED WHERE seq = ?"
_NEXT = "SELECT seq FROM memories NOT INDEXED WHERE seq > ? ORDER BY seq LIMIT 1"
#: How far past a ruined stretch rows are looked for one by one (a bigger gap in `seq`
#: is rows that were never there).
_GAP_LOOKUPS = 1_000_000


@dataclass(slots=True)
class Salvage:
    """The live memories that still read, as export records, and the rows that did not."""

    records: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    return kind_of(exc) is Kind.DAMAGED


def _rows(conn: sqlite3.Connection, salvage: Salvage) -> Iterator[sqlite3.Row]:
    after = 0
    while True:
        try:
            found = conn.execute(_NEXT, (after,)).fetchone()
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            # The page holding the next row is ruined: find the next row that reads by
            # steps that double, then look up each rowid of the gap on its own.
            step, found = 1, None
            while after + step < 1 << 62:
                try:
                    found = conn.execute(_NEXT, (after + step,)).fetchone()
                    break
                except sqlite3.DatabaseError as inner:
                    if not _damaged(inner):
                        raise
                    step *= 2
            end = found[0] if found is not None else after + step
            for seq in range(after + 1, min(end, after + 1 + _GAP_LOOKUPS)):
                try:
                    row = conn.execute(_ONE, (seq,)).fetchone()
                except sqlite3.DatabaseError as inner:
                    if not _damaged(inner):
                        raise
                    salvage.unreadable += 1
                    continue
                if row is not None:
                    yield row
            if found is None:
                return
            after = found[0] - 1
            continue
        if found is None:
            return
        try:
            row = conn.execute(_ONE, (found[0],)).fetchone()
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            salvage.unreadable += 1
        else:
            if row is not None:
                yield row
        after = found[0]


def readable_memories(path: Path) -> Salvage:
    """Every live memory of `path` that still reads (sorted by id, as `export` sorts)."""
    salvage = Salvage()
    if not path.exists() or path.stat().st_size == 0:
        return salvage
    log.info("memory_salvage_started", path=str(path))
    with opened(path, readonly=True) as conn:
        conn.row_factory = sqlite3.Row
        try:
            for row in _rows(conn, salvage):
                try:
                    memory = row_memory(row)
                except (ValueError, KeyError, TypeError):
                    salvage.unreadable += 1  # a row whose fields were damaged
                    continue
                if memory.deleted_at is None and memory.superseded_by is None:
                    salvage.records.append(memory_to_record(memory))
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            # Not even the table's root reads ("file is not a database"): nothing to save.
            salvage.unreadable += 1
    salvage.records.sort(key=lambda r: str(r["id"]))
    log.info("memory_salvage_finished", path=str(path), memories=len(salvage.records),
             unreadable=salvage.unreadable)
    return salvage


def move_aside(path: Path, now: datetime) -> Path | None:
    """`path` (and its `-wal` and `-shm`) renamed to `<path>.damaged-<UTC time>`; the new
    name, or None when there was no file."""
    if not path.exists():
        return None
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    for suffix in ("-wal", "-shm", ""):
        part = Path(f"{path}{suffix}")
        if part.exists():
            part.rename(Path(f"{aside}{suffix}"))
    return aside
