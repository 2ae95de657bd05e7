"""The daemon's local API: JSON over HTTP on a Unix socket in the state directory.

`POST /v1/<operation>` with a JSON object runs one `MemoryOps` operation and
answers `{"ok": true, ...result}` or `{"ok": false, "error": "<one line>"}` with
a status that says what went wrong (400 bad request, 404 not found, 409
conflict, 413 too large, 503 a store is unavailable right now, 504 too slow,
500 a bug, logged). `GET /v1/status` is `memoryd status --json`.

No TCP port and no token: the socket is mode 0600 in the 0700 state
directory, so only its user can connect. Requests are bounded in size
(MAX_REQUEST_BYTES) and in time (per operation); concurrent clients are served;
nothing a client sends can stop the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from daemon.api.operations import OPERATIONS, MemoryOps
from daemon.errors import ApiError, MemorydError

log = structlog.get_logger("memoryd.api")

MAX_REQUEST_BYTES = 1 << 20
#: Seconds an operation may take; syncing a long session may take a while.
TIMEOUTS = {"sync": 300.0, "session_event": 120.0}
DEFAULT_TIMEOUT = 30.0
API_VERSION = 1

OpsProvider = Callable[[], Awaitable[MemoryOps]]
StatusProvider = Callable[[], Awaitable[dict[str, Any]]]


def _answer(status: int, payload: dict[str, Any]) -> web.Response:
    return web.Response(status=status, content_type="application/json",
                        text=json.dumps(payload, ensure_ascii=False, default=str))


def _error(status: int, message: str) -> web.Response:
    return _answer(status, {"ok": False, "error": message})


def make_app(ops: OpsProvider, status: StatusProvider,
             on_request: Callable[[], None] | None = None,
             log_location: str = "its log") -> web.Application:
    """The API as an aiohttp application (served on the socket by `ApiServer`);
    `on_request` is told of every operation asked for (the daemon's background work
    gives way to its clients); `log_location` is named to a client when a request fails
    inside the daemon."""

    async def run_operation(request: web.Request) -> web.Response:
        name = request.match_info["operation"]
        if on_request is not None:
            on_request()
        operation = OPERATIONS.get(name)
        if operation is None:
            return _error(404, f"no operation {name!r}")
        try:
            args = await request.json(loads=json.loads)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"a request may hold at most {MAX_REQUEST_BYTES} bytes")
        except (ValueError, UnicodeDecodeError):
            return _error(400, "the body must be a JSON object")
        except RecursionError:
            # json's decoder recurses once a level: `[` x 100,000 is a bad request, not a bug.
            return _error(400, "the body must be a JSON object (this one is nested too deeply)")
        if not isinstance(args, dict):
            return _error(400, "the body must be a JSON object")
        try:
            async with asyncio.timeout(TIMEOUTS.get(name, DEFAULT_TIMEOUT)):
                # Shielded: a client that gives up must not cancel a save half-way.
                result = await asyncio.shield(_call(name, ops, args))
        except ApiError as exc:
            return _error(exc.status, str(exc))
        except TimeoutError:
            return _error(504, f"{name} took longer than {TIMEOUTS.get(name, DEFAULT_TIMEOUT)} s")
        except MemorydError as exc:
            log.warning("api_operation_failed", operation=name, error=str(exc))
            return _error(503 if exc.transient else 500, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        except ImportError:
            # The package was replaced under the running daemon (`pip install` again):
            # code it had not loaded yet is gone or newer. Only a restart mends that.
            log.exception("api_operation_crashed", operation=name)
            return _error(500, f"{name} failed: memoryd's files changed under the running"
                               " daemon (reinstalled?); restart it (`memoryd service restart`"
                               f", or stop and start `memoryd run`); details in {log_location}")
        except Exception:
            log.exception("api_operation_crashed", operation=name)
            return _error(500, f"{name} failed inside memoryd (see {log_location})")
        return _answer(200, {"ok": True, **result})

    async def get_status(_request: web.Request) -> web.Response:
        try:
            return _answer(200, {"ok": True, "status": await status()})
        except MemorydError as exc:
            return _error(503, str(exc))

    async def hello(_request: web.Request) -> web.Response:
        return _answer(200, {"ok": True, "service": "memoryd", "api": API_VERSION,
                             "pid": os.getpid()})

    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.router.add_get("/v1", hello)
    app.router.add_get("/v1/status", get_status)
    app.router.add_post("/v1/{operation}", run_operation)
    return app


async def _call(name: str, ops: OpsProvider, args: Mapping[str, Any]) -> dict[str, Any]:
    return await (await ops()).run(name, args)


class ApiServer:
    """The app served on `path`; start and stop are owned by the service."""

    def __init__(self, path: Path, app: web.Application) -> None:
        self.path = path
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)

    async def start(self) -> None:
        """Bind and listen; raises OSError when the socket cannot be made (a path too long
        for AF_UNIX, a read-only directory)."""
        _remove_stale_socket(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Born 0600: no window where another user could connect. Bound without an await
        # in between, so no other task runs under the narrowed umask.
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        log.info("api_listening", socket=str(self.path))

    async def stop(self) -> None:
        await self._runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)


def _remove_stale_socket(path: Path) -> None:
    # The caller holds the state directory's lock, so a socket left here is a dead
    # daemon's. Anything else at that path is not ours to delete.
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise MemorydError(f"{path} exists and is not a socket; move it away")
    os.unlink(path)
