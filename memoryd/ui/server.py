"""Serving the viewer on 127.0.0.1, on a port chosen at start, inside a running loop.

In the daemon it starts on the first `memoryd ui` and stops after IDLE_TIMEOUT
without a request, so a viewer nobody has open costs nothing; the next
`memoryd ui` starts it again with a new token. Without a daemon, `memoryd ui`
serves it itself until interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Iterator
from typing import Any

import structlog
import uvicorn

from memoryd.ui.app import make_app
from memoryd.ui.data import ViewerData

log = structlog.get_logger("memoryd.ui")

IDLE_TIMEOUT = 1800.0


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The daemon (or the CLI) owns SIGTERM and SIGINT; the viewer is stopped by them.
        yield


class UiServer:
    """The viewer over `data`; `await start()` then `url` is what a browser opens."""

    def __init__(self, data: ViewerData, *, port: int = 0,
                 idle_timeout: float | None = IDLE_TIMEOUT) -> None:
        self._secret = secrets.token_urlsafe(32)
        self._idle_timeout = idle_timeout
        self._last_request = time.monotonic()
        app = make_app(data, self._secret)

        async def stamped(scope: Any, receive: Any, send: Any) -> None:
            self._last_request = time.monotonic()
            await app(scope, receive, send)

        config = uvicorn.Config(stamped, host="127.0.0.1", port=port, log_config=None,
                                access_log=False, lifespan="off", log_level="warning",
                                server_header=False)
        self._server = _Server(config)
        self._data = data
        self._task: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._warm: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The address that logs a browser in (it carries the token: never log it)."""
        return f"http://127.0.0.1:{self.port}/login?token={self._secret}"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(), name="ui")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start (port in use, ...)
                raise OSError("the viewer stopped while starting")
            await asyncio.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        if self._idle_timeout is not None:
            self._watch = asyncio.create_task(self._stop_when_idle(self._idle_timeout))
        # The chart scans a month of messages: drawn now, it is ready for the first page.
        self._warm = asyncio.create_task(self._warm_chart())
        log.info("ui_started", port=self.port)

    async def _warm_chart(self) -> None:
        try:
            await self._data.chart()
        except Exception as exc:  # the page draws it (or says why) when asked
            log.debug("ui_chart_not_warmed", error=str(exc))

    async def _stop_when_idle(self, idle: float) -> None:
        while True:
            await asyncio.sleep(min(60.0, idle / 4))
            if time.monotonic() - self._last_request >= idle:
                log.info("ui_stopped_idle", port=self.port, idle_seconds=idle)
                await self.stop(from_watch=True)
                return

    async def wait(self) -> None:
        if self._task is not None:
            await self._task

    async def stop(self, *, from_watch: bool = False) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._watch is not None and not from_watch:
            self._watch.cancel()
        if self._warm is not None:
            self._warm.cancel()
