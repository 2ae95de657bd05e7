"""The daemon's database, opened for work: created, private, migrated."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiosqlite

from memoryd.files import ensure_private_dir
from memoryd.store.connection import connect
from memoryd.store.migrations import migrate

if TYPE_CHECKING:
    from memoryd.config import Settings


@contextlib.asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[aiosqlite.Connection]:
    """The daemon's database, created and migrated, closed on exit."""
    ensure_private_dir(settings.state_dir)
    conn = await connect(settings.database_path)
    try:
        await migrate(conn)
        yield conn
    finally:
        await conn.close()
