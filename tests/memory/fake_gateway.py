"""A Memory Gateway for the tests: a real HTTP server on 127.0.0.1 (port 0) speaking the
protocol, with switches for the ways a real one fails."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

KEY = "gw-secret-key-0123456789"


@dataclass
class FakeGateway:
    """What it stored, what it was asked, and how it misbehaves next."""

    adds: list[dict[str, Any]] = field(default_factory=list)
    flushes: list[dict[str, Any]] = field(default_factory=list)
    searches: list[dict[str, Any]] = field(default_factory=list)
    #: The next calls answer with this status (5xx, 401) instead of working.
    fail_with: int | None = None
    #: Seconds to wait before answering (past the client's timeout: a slow gateway).
    delay: float = 0.0
    #: Apply the next add, then drop the connection without an answer.
    lose_answer_after_add: bool = False
    #: The next search answers with this text instead of JSON.
    malformed: str | None = None
    #: Search answers with these results.
    results: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    def _refuse(self, body: dict[str, Any]) -> web.Response | None:
        if body.get("user_key") != KEY:
            return web.json_response({"error": "bad key"}, status=401)
        if self.fail_with is not None:
            return web.json_response({"error": "failing"}, status=self.fail_with)
        return None

    async def _search(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(self.delay)
        refused = self._refuse(body)
        if refused is not None:
            return refused
        self.searches.append(body)
        if self.malformed is not None:
            return web.Response(text=self.malformed, content_type="application/json")
        return web.json_response({"results": self.results})

    async def _add(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(self.delay)
        refused = self._refuse(body)
        if refused is not None:
            return refused
        self.adds.append(body)
        if self.lose_answer_after_add:
            self.lose_answer_after_add = False
            assert request.transport is not None
            request.transport.close()  # applied, and the answer is lost
            raise asyncio.CancelledError
        return web.json_response({"status": "ok"})

    async def _flush(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        refused = self._refuse(body)
        if refused is not None:
            return refused
        self.flushes.append(body)
        return web.json_response({"status": "ok"})

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/memories/search", self._search)
        app.router.add_post("/memories/add", self._add)
        app.router.add_post("/memories/flush", self._flush)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
