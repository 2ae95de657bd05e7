"""Connections to the server: a pool opened and configured, a connection taken with a
retry while the server is away, driver errors translated (never with the password), and
the pool replaced once the server answers again."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from memoryd.errors import BackendError, BackendUnavailable
from memoryd.memory.backends.postgres.schema import BACKEND_NAME, sanitize, translate
from memoryd.memory.recall import hybrid

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

log = structlog.get_logger("memoryd.memory.postgres")

ATTEMPTS = 2  # a second try after a short pause; then the caller (the chain) falls back


class Connections:
    """One backend's pool (None once closed) and how its connections are used."""

    def __init__(self, pool: AsyncConnectionPool[Any], secret: str | None,
                 new_pool: Callable[[], Awaitable[AsyncConnectionPool[Any]]] | None = None
                 ) -> None:
        self.pool: AsyncConnectionPool[Any] | None = pool
        self._secret = secret
        self._new_pool = new_pool
        self._pool_lock = asyncio.Lock()

    def _pool_or_raise(self) -> AsyncConnectionPool[Any]:
        if self.pool is None:
            raise BackendError("the memory backend is closed", backend=BACKEND_NAME)
        return self.pool

    def _error(self, exc: Exception) -> BackendError:
        return translate(exc, self._secret)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection; getting one is retried while the server is away.

        Driver errors inside become BackendError (BackendUnavailable when transient).
        """
        pool = self._pool_or_raise()

        async def get() -> psycopg.AsyncConnection[Any]:
            try:
                got: psycopg.AsyncConnection[Any] = await pool.getconn()
            except Exception as exc:
                raise self._error(exc) from None
            return got

        conn: psycopg.AsyncConnection[Any] = await transient_retries()(get)
        try:
            yield conn
        except (BackendError, ValueError):
            raise  # ours already, or the caller's bad argument (the protocol's ValueError)
        except Exception as exc:
            raise self._error(exc) from None
        finally:
            await pool.putconn(conn)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def read(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
                   ) -> list[dict[str, Any]]:
        """A read, retried as a whole while the server is away (reads change nothing)."""

        async def once() -> list[dict[str, Any]]:
            async with self.connection() as conn:
                return await fetch_all(conn, sql, params)

        return await transient_retries()(once)

    async def is_available(self) -> bool:
        """Whether the server answers now. After an outage the pool only tries to reconnect
        with a growing back-off (1, 2, 4 ... s): when it has no connection to give but the
        server answers a direct connection, the pool is replaced, so the chain's outbox
        drains as soon as the server is back rather than minutes later."""
        pool = self.pool
        if pool is None:
            return False
        try:
            async with pool.connection(timeout=2.0) as conn:
                await conn.execute("SELECT 1")
        except Exception:
            return await self._replace_pool(pool)
        return True

    async def _replace_pool(self, stale: AsyncConnectionPool[Any]) -> bool:
        if self._new_pool is None:
            return False
        async with self._pool_lock:
            if self.pool is not stale:
                return self.pool is not None
            try:
                fresh = await self._new_pool()
            except BackendError:
                return False
            self.pool = fresh
        await stale.close(timeout=1.0)
        log.info("postgres_pool_replaced", backend=BACKEND_NAME)
        return True

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            await pool.close()

    def describe(self, message: str) -> str:
        """`message` without this backend's password (for callers that format their own)."""
        return sanitize(message, self._secret)


async def fetch_all(conn: psycopg.AsyncConnection[Any], sql: str,
                    params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
    cur = await conn.execute(sql, params)
    return list(await cur.fetchall()) if cur.description else []


async def open_pool(dsn: str, secret: str | None, connect_timeout: float,
                    max_connections: int) -> AsyncConnectionPool[Any]:
    """A connection pool, open, with a connection ready (BackendError when there is none)."""
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("SET TIME ZONE 'UTC'")
        # HNSW stops at ef_search candidates, before the owner and project filters: as many
        # as recall asks for, and iterative scans (pgvector 0.8) go on until enough pass the
        # filters. The scan's order is then approximate; recall sorts.
        await conn.execute(f"SET hnsw.ef_search = {hybrid.CANDIDATES}")
        await conn.execute("SET hnsw.iterative_scan = relaxed_order")

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=max_connections, open=False, timeout=connect_timeout,
        kwargs={"autocommit": True, "row_factory": dict_row,
                "connect_timeout": max(1, math.ceil(connect_timeout))},
        configure=configure, name="memoryd-postgres",
        # A server that restarted leaves every pooled connection dead: each is checked (one
        # round trip) when taken, so a dead one is replaced instead of failing a call.
        check=AsyncConnectionPool.check_connection)
    try:
        await pool.open(wait=True, timeout=connect_timeout)
    except BaseException as exc:
        await pool.close()
        if isinstance(exc, Exception):
            raise translate(exc, secret) from None
        raise
    return pool


def transient_retries() -> AsyncRetrying:
    """A second try after a short pause, for transient failures only (BackendUnavailable);
    then the error goes to the caller (the chain falls back)."""
    return AsyncRetrying(stop=stop_after_attempt(ATTEMPTS), wait=wait_fixed(0.2),
                         retry=retry_if_exception_type(BackendUnavailable), reraise=True)
