"""The daemon's local API: JSON over HTTP on a Unix socket in the state directory.

`POST /v1/<operation>` with a JSON object runs one `MemoryOps` operation and
answers `{"ok": true, ...result}` or `{"ok": false, "error": "<one line>"}` with
a status that says what went wrong (400 bad request, 404 not found, 409
conflict, 413 too large, 503 a store is unavailable right now, 504 too slow,
500 a bug, logged). `GET /v1/status` is `memoryd status --json`.

`POST /v1/hook/<agent>/<event>[?timeout=S]` takes an agent's hook payload as the
agent wrote it and answers what the agent is to read (its hook JSON with the
block), or 204 for nothing: the shell hook client (`hooks/memoryd-hook.sh`) needs
no JSON of its own. It is `session_event`, with the request `hooks.fast` builds.

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
import resource
import socket
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from memoryd.api.registry import OPERATIONS, MemoryOps
from memoryd.errors import FILES_REPLACED, ApiError, MemorydError
from memoryd.hook_protocol import ANSWER_MARGIN, agent_output, event_request, memoryd_event
from memoryd.names import AGENT_HOME_ENV, agent_transcript_root

log = structlog.get_logger("memoryd.api")

MAX_REQUEST_BYTES = 1 << 20
#: Where the shell hook client names the folder the agent's environment moved its home to
#: (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `GEMINI_CLI_HOME`), which the daemon cannot see.
AGENT_HOME_HEADER = "X-Memoryd-Agent-Home"
#: Seconds an operation may take; syncing a long session may take a while.
TIMEOUTS = {"sync": 300.0, "session_event": 120.0}
DEFAULT_TIMEOUT = 30.0
API_VERSION = 1
#: Connections served at once, at most (and never more than half the descriptors the
#: process may open: past that, every accept failed and logged a traceback).
MAX_CONNECTIONS = 512
#: Connections accepted in one go (asyncio's accept loop), well inside the descriptors
#: `connection_limit` leaves free.
ACCEPT_BATCH = 8
#: Seconds a connection may stay open without sending a byte, and open between requests:
#: clients (hooks, commands) send their request at once and close after the answer.
SILENT_TIMEOUT = 10.0
KEEPALIVE_TIMEOUT = 10.0

OpsProvider = Callable[[], Awaitable[MemoryOps]]
StatusProvider = Callable[[], Awaitable[dict[str, Any]]]


def _answer(status: int, payload: dict[str, Any]) -> web.Response:
    return web.Response(status=status, content_type="application/json",
                        text=json.dumps(payload, ensure_ascii=False, default=str))


def _error(status: int, message: str) -> web.Response:
    return _answer(status, {"ok": False, "error": message})


class _Routes:
    """The API's routes over the daemon's operations and status."""

    def __init__(self, ops: OpsProvider, status: StatusProvider,
                 on_request: Callable[[], None] | None, log_location: str,
                 on_damage: Callable[[MemorydError], None] | None) -> None:
        self.ops, self.status, self.on_request = ops, status, on_request
        self.log_location, self.on_damage = log_location, on_damage

    async def perform(self, name: str, args: dict[str, Any]) -> dict[str, Any] | web.Response:
        """The operation's result, or the error response that says why there is none."""
        try:
            async with asyncio.timeout(TIMEOUTS.get(name, DEFAULT_TIMEOUT)):
                # Shielded: a client that gives up must not cancel a save half-way.
                return await asyncio.shield(_call(name, self.ops, args))
        except ApiError as exc:
            return _error(exc.status, str(exc))
        except TimeoutError:
            return _error(504, f"{name} took longer than {TIMEOUTS.get(name, DEFAULT_TIMEOUT)} s")
        except MemorydError as exc:
            log.warning("api_operation_failed", operation=name, error=str(exc))
            if exc.damaged:
                # Found by a request: the daemon stops writing as if it had found it itself
                # (`run` exits 74), and the client says so with the same status.
                if self.on_damage is not None:
                    self.on_damage(exc)
                return _answer(500, {"ok": False, "error": str(exc), "damaged": True})
            return _error(503 if exc.transient else 500, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        except ImportError:
            # The package was replaced under the running daemon (`pip install` again):
            # code it had not loaded yet is gone or newer. Only a restart mends that.
            log.exception("api_operation_crashed", operation=name)
            return _error(500, f"{name} failed: {FILES_REPLACED}; details in {self.log_location}")
        except Exception:
            log.exception("api_operation_crashed", operation=name)
            return _error(500, f"{name} failed inside memoryd (see {self.log_location})")

    async def run_operation(self, request: web.Request) -> web.Response:
        name = request.match_info["operation"]
        if self.on_request is not None:
            self.on_request()
        operation = OPERATIONS.get(name)
        if operation is None:
            return _error(404, f"no operation {name!r}")
        args = await _json_object(request)
        if isinstance(args, web.Response):
            return args
        result = await self.perform(name, args)
        if isinstance(result, web.Response):
            return result
        return _answer(200, {"ok": True, **result})

    async def run_hook(self, request: web.Request) -> web.Response:
        """An agent's hook payload as the agent wrote it (the shell hook client's way in):
        answers the agent's own hook JSON, or 204 when the agent is to be told nothing."""
        agent, agent_event = request.match_info["agent"], request.match_info["event"]
        if self.on_request is not None:
            self.on_request()
        if agent not in AGENT_HOME_ENV:
            return _error(404, f"no agent {agent!r}")
        event = memoryd_event(agent, agent_event)
        if event is None:
            return web.Response(status=204)
        payload = await _json_object(request)
        if isinstance(payload, web.Response):
            return payload
        home = request.headers.get(AGENT_HOME_HEADER)
        root = agent_transcript_root(agent, {AGENT_HOME_ENV[agent][0]: home}) if home else None
        args = event_request(agent, event, payload, root)
        cap = _seconds(request.query.get("timeout"))
        if cap is not None:
            args["answer_within"] = max(0.0, cap - ANSWER_MARGIN)
        # A client that gave up has closed its connection; a daemon that was stopped while
        # the request waited in the socket learns of it only this way (the request names
        # no time: the shell cannot tell one finer than a second).
        args["still_waiting"] = lambda: (request.transport is not None
                                         and not request.transport.is_closing())
        result = await self.perform("session_event", args)
        if isinstance(result, web.Response):
            return result
        output = agent_output(agent_event, result.get("context"))
        if output is None:
            return web.Response(status=204)
        return web.Response(status=200, content_type="application/json", text=output)

    async def get_status(self, _request: web.Request) -> web.Response:
        try:
            return _answer(200, {"ok": True, "status": await self.status()})
        except MemorydError as exc:
            return _error(503, str(exc))

    async def hello(self, _request: web.Request) -> web.Response:
        return _answer(200, {"ok": True, "service": "memoryd", "api": API_VERSION,
                             "pid": os.getpid()})


def make_app(ops: OpsProvider, status: StatusProvider,
             on_request: Callable[[], None] | None = None,
             log_location: str = "its log",
             on_damage: Callable[[MemorydError], None] | None = None) -> web.Application:
    """The API as an aiohttp application (served on the socket by `ApiServer`);
    `on_request` is told of every operation asked for (the daemon's background work
    gives way to its clients); `log_location` is named to a client when a request fails
    inside the daemon; `on_damage` is told of a damaged database a request found."""
    routes = _Routes(ops, status, on_request, log_location, on_damage)
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.router.add_get("/v1", routes.hello)
    app.router.add_get("/v1/status", routes.get_status)
    app.router.add_post("/v1/{operation}", routes.run_operation)
    app.router.add_post("/v1/hook/{agent}/{event}", routes.run_hook)
    return app


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    """The request's JSON object, or the 400/413 response that says what is wrong with it."""
    try:
        args = await request.json(loads=json.loads)
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"a request may hold at most {MAX_REQUEST_BYTES} bytes")
    except (ValueError, UnicodeDecodeError):
        return _error(400, "the body must be a JSON object")
    except RecursionError:
        # json's decoder recurses once a level: `[` x 100,000 is a bad request, not a bug.
        return _error(400, "the body must be a JSON object (this one is nested too deeply)")
    except ConnectionResetError:
        # The client went away mid-body (aiohttp's ClientConnectionResetError): nothing to
        # answer and nothing wrong here, so no traceback for each such client.
        log.debug("api_request_abandoned", path=request.path)
        return _error(400, "the request ended before its body did")
    if not isinstance(args, dict):
        return _error(400, "the body must be a JSON object")
    return args


def _seconds(value: str | None) -> float | None:
    """A hook's time cap from `?timeout=`: seconds in (0, 600], else None (no cap)."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 < seconds <= 600 else None


async def _call(name: str, ops: OpsProvider, args: Mapping[str, Any]) -> dict[str, Any]:
    return await (await ops()).run(name, args)


def connection_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, soft // 2))


class _Gate:
    """Admits connections up to `limit`. At the limit, a new one takes the place of the
    oldest that has not sent a byte (idle connections cannot lock clients out); when every
    connection is talking, it is refused. Refusing is logged when it begins and ends."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], limit: int,
                 silent_timeout: float) -> None:
        self._factory = factory
        self.limit = limit
        self.silent_timeout = silent_timeout
        self._live: dict[_Guarded, None] = {}  # oldest first
        self._refused = 0
        self._evicted = 0

    def __call__(self) -> asyncio.Protocol:
        return _Guarded(self, self._factory())

    def admit(self, connection: _Guarded) -> bool:
        if len(self._live) >= self.limit:
            silent = next((c for c in self._live if not c.spoke), None)
            if silent is None:
                if self._refused == 0:
                    log.warning("api_connections_refused", limit=self.limit,
                                reason="every connection is busy")
                self._refused += 1
                return False
            self._live.pop(silent)
            silent.close()
            self._evicted += 1
            if self._evicted == 1:
                log.warning("api_idle_connections_closed", limit=self.limit,
                            reason="the connection limit was reached")
        self._live[connection] = None
        return True

    def release(self, connection: _Guarded) -> None:
        self._live.pop(connection, None)
        if (self._refused or self._evicted) and len(self._live) < self.limit // 2:
            log.info("api_connections_normal", refused=self._refused, closed=self._evicted)
            self._refused = self._evicted = 0


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the gate: admitted or closed at
    once, and closed when it stays silent for `silent_timeout`."""

    def __init__(self, gate: _Gate, inner: asyncio.Protocol) -> None:
        self._gate = gate
        self._inner = inner
        #: A whole request head has arrived: the connection is a client's, not an idle
        #: one (a byte alone is not enough: 600 one-byte connections held the API).
        self.spoke = False
        self._tail = b""
        self._admitted = False
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if not self._gate.admit(self):
            if isinstance(transport, asyncio.Transport):
                transport.abort()
            else:
                transport.close()
            return
        self._admitted = True
        self._timer = asyncio.get_running_loop().call_later(self._gate.silent_timeout,
                                                            self.close)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.spoke:
            window = self._tail + data
            if b"\r\n\r\n" in window:
                self.spoke = True
                if self._timer is not None:
                    self._timer.cancel()
            else:
                self._tail = window[-3:]  # the head's end may come split across reads
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._gate.release(self)
        if self._admitted:
            self._inner.connection_lost(exc)

    def close(self) -> None:
        if self._transport is not None and not self.spoke:
            self._transport.close()


class _ListenSocket(socket.socket):
    """A socket whose listen queue is never shallower than `depth`: asyncio gives its
    accept batch to listen() as well, and a queue deepened after it returned would leave
    a moment with the shallow one."""

    depth = 0

    def listen(self, backlog: int = socket.SOMAXCONN, /) -> None:
        super().listen(max(backlog, self.depth))


class ApiServer:
    """The app served on `path`; start and stop are owned by the service."""

    def __init__(self, path: Path, app: web.Application) -> None:
        self.path = path
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     keepalive_timeout=KEEPALIVE_TIMEOUT)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and listen; raises OSError when the socket cannot be made (a path too long
        for AF_UNIX, a read-only directory)."""
        _remove_stale_socket(self.path)
        sock = _ListenSocket(socket.AF_UNIX, socket.SOCK_STREAM)
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
        server = self._runner.server
        assert server is not None
        gate = _Gate(server, connection_limit(), SILENT_TIMEOUT)
        # asyncio accepts up to `backlog` connections at a time, each a descriptor before
        # the gate sees any: a burst queued while the loop was busy took the daemon past
        # its descriptors (EMFILE) at the limit. So it takes a few at a time, and then the
        # listen queue is made as deep as the connections served (with asyncio's 100, a
        # burst of 200 clients had 48 refused at connect).
        sock.depth = gate.limit
        self._server = await asyncio.get_running_loop().create_unix_server(
            gate, sock=sock, backlog=ACCEPT_BATCH)
        log.info("api_listening", socket=str(self.path), max_connections=gate.limit)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
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
