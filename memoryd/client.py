"""How every client reaches memory: the running daemon's API, else the stores directly.

The daemon is the one writer of its databases, so a client that finds it
running asks it (httpx over the Unix socket). When no daemon answers, the
client opens the stores itself and runs the very same operations
(`api.operations.MemoryOps`) in-process, so nothing depends on the service being
installed. `call` answers the result's JSON either way, or raises `ApiError`
(a refused request) or a `MemorydError` (a store that cannot be opened).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiosqlite
import httpx
import structlog

from memoryd.api.registry import OPERATIONS, MemoryOps
from memoryd.clock import Clock
from memoryd.config import Settings, SourceKind
from memoryd.errors import AlreadyRunningError, ApiError, DaemonUnreachable, StoreDamaged
from memoryd.lifecycle.recovery import Recovery, SyncReport
from memoryd.lifecycle.sync_policy import recovery_policy
from memoryd.memory import MemoryBackend
from memoryd.memory.opening import memory_user, open_memory_backend
from memoryd.store.connection import connect
from memoryd.store.database import open_store

log = structlog.get_logger("memoryd.client")


class DaemonClient:
    """The daemon's API over its Unix socket."""

    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(settings.socket_path)),
            base_url="http://memoryd", timeout=timeout)

    async def close(self) -> None:
        await self._http.aclose()

    async def call(self, operation: str, args: Mapping[str, Any]) -> dict[str, Any]:
        try:
            response = await self._http.post(f"/v1/{operation}", json=dict(args))
        except httpx.ConnectError as exc:
            raise DaemonUnreachable(f"no daemon answers ({type(exc).__name__})") from None
        except httpx.TimeoutException:
            raise ApiError(504, f"the daemon did not answer {operation} in time") from None
        except httpx.TransportError as exc:
            # Connected, then lost: the daemon may have done it, so never run it again here.
            raise ApiError(502, f"the daemon dropped the connection during {operation}"
                                f" ({type(exc).__name__}); it may or may not have"
                                " been done") from None
        return _unwrap(response)


def _unwrap(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise ApiError(response.status_code, "the daemon sent an answer that is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(response.status_code, "the daemon sent an unexpected answer")
    if response.status_code != 200 or not body.get("ok"):
        if body.get("damaged"):
            # The daemon found a database damaged: the command exits 74, as the daemon does.
            raise StoreDamaged(str(body.get("error") or "a database is damaged"))
        raise ApiError(response.status_code, str(body.get("error") or "request failed"))
    body.pop("ok", None)
    return body


class DirectRuntime:
    """What the daemon would do for a hook, done in this process (no daemon runs)."""

    def __init__(self, settings: Settings, clock: Clock, conn: aiosqlite.Connection,
                 backend: MemoryBackend) -> None:
        self._settings = settings
        self._clock = clock
        self._recovery = Recovery(conn, backend, clock, recovery_policy(settings))

    async def follow(self, path: str, kind: SourceKind, *, read_to_end: bool) -> None:
        if not read_to_end:
            return  # the daemon, once it runs, discovers what lies under its roots
        # Loaded here: a hook's usual events (start, prompt) never need the ingester.
        from memoryd.ingest.once import ingest_once

        try:
            await ingest_once(self._settings, self._clock, extra=((path, kind),))
        except AlreadyRunningError:
            log.info("ingest_skipped_daemon_running", path=path)

    async def catch_up(self, seconds: float) -> None:
        return None  # no daemon's watch to catch up with: the stores are read as they are

    async def sync(self, session_id: int | None) -> SyncReport:
        return await self._recovery.run(force=True, session_id=session_id)

    def sync_later(self, session_id: int, delay: float, *,
                   settle_questions: bool = False) -> None:
        # No daemon to wait in: the session is saved when it pauses, or by the next run.
        log.debug("sync_later_without_daemon", session_id=session_id, delay=delay)

    async def open_ui(self) -> str:
        raise ApiError(503, "no daemon runs to serve the viewer (`memoryd ui` serves it"
                            " itself then)")


@contextlib.asynccontextmanager
async def direct_ops(settings: Settings, clock: Clock, *, vectors: bool = True,
                     readonly: bool = False) -> AsyncIterator[MemoryOps]:
    """The operations over stores opened in this process (keyword-only without `vectors`;
    `readonly`: both stores as they are, for reading only, where nothing can be written)."""
    async with contextlib.AsyncExitStack() as stack:
        if readonly:
            conn = await connect(settings.database_path, readonly=True, immutable=True)
            stack.push_async_callback(conn.close)
        else:
            conn = await stack.enter_async_context(open_store(settings))
        backend = await open_memory_backend(settings, clock, vectors=vectors,
                                            readonly=readonly)
        stack.push_async_callback(backend.close)
        yield MemoryOps(settings, clock, conn, backend,
                        DirectRuntime(settings, clock, conn, backend))


class MemoryClient:
    """One client session: asks the daemon, falls back to the stores when none answers."""

    def __init__(self, settings: Settings, clock: Clock, *, timeout: float = 30.0,
                 interface: str = "api") -> None:
        self._settings = settings
        self._clock = clock
        #: Who is asking (`cli`, `mcp`, ...), for the audit trail unless a call says so.
        self._interface = interface
        self._daemon: DaemonClient | None = DaemonClient(settings, timeout)
        self._stack = contextlib.AsyncExitStack()
        self._direct: MemoryOps | None = None
        # Calls may overlap (the MCP server answers them concurrently): the stores are
        # opened once, by the first, and the others wait for it.
        self._opening = asyncio.Lock()
        #: "daemon" or "direct": which one answered the last call.
        self.via = "daemon"

    async def __aenter__(self) -> MemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._daemon is not None:
            await self._daemon.close()
            self._daemon = None
        await self._stack.aclose()

    async def call(self, operation: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if operation not in OPERATIONS:
            raise ApiError(404, f"no operation {operation!r}")
        args = {"interface": self._interface, "client_user": memory_user(self._settings), **args}
        if self._daemon is not None and self._settings.socket_path.exists():
            try:
                result = await self._daemon.call(operation, args)
                self.via = "daemon"
                return result
            except DaemonUnreachable as exc:
                log.debug("daemon_unreachable_falling_back", error=str(exc))
        ops = await self._direct_ops()
        self.via = "direct"
        return await ops.run(operation, args)

    async def _direct_ops(self) -> MemoryOps:
        async with self._opening:
            if self._direct is None:
                self._direct = await self._stack.enter_async_context(
                    direct_ops(self._settings, self._clock))
        return self._direct
