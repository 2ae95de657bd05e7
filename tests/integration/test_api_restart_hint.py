"""A request that fails inside the daemon names where its log is; one that fails because
the package changed under the running daemon says to restart it (issue 36.1: `memoryd ui`
said only "see its log" while the log held `ModuleNotFoundError: memoryd.ui`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryd.api.server import ApiServer, make_app
from memoryd.service_units import log_location


class _Replaced:
    """Operations whose code is gone from disk (a fault injected: the package reinstalled
    under the daemon), or that fail in some other way."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def run(self, name: str, args: Any) -> dict[str, Any]:
        raise self.error


async def _ask(tmp_path: Path, error: Exception, where: str) -> dict[str, Any]:
    ops = _Replaced(error)

    async def provide() -> Any:
        return ops

    async def status() -> dict[str, Any]:
        return {}

    socket = tmp_path / "api.sock"
    server = ApiServer(socket, make_app(provide, status, None, where))
    await server.start()
    try:
        transport = httpx.AsyncHTTPTransport(uds=str(socket))
        async with httpx.AsyncClient(transport=transport, base_url="http://memoryd") as client:
            answer = await client.post("/v1/open_ui", json={})
    finally:
        await server.stop()
    assert answer.status_code == 500
    body: dict[str, Any] = answer.json()
    return body


async def test_a_package_changed_under_the_daemon_says_restart(tmp_path: Path) -> None:
    where = log_location({"JOURNAL_STREAM": "8:123"}, tmp_path, 42)
    body = await _ask(tmp_path, ModuleNotFoundError("No module named 'memoryd.ui'"), where)
    assert "changed under the running daemon" in body["error"]
    assert "restart" in body["error"] and "journalctl --user -u memoryd.service" in body["error"]


async def test_any_other_failure_names_where_the_log_is(tmp_path: Path) -> None:
    where = log_location({}, tmp_path, 4242)
    body = await _ask(tmp_path, RuntimeError("boom"), where)
    assert body["error"] == ("open_ui failed inside memoryd (see the standard error of"
                             " `memoryd run` (pid 4242))")
    assert "boom" not in body["error"]


def test_the_log_is_where_the_service_manager_keeps_it(tmp_path: Path) -> None:
    launchd = log_location({"XPC_SERVICE_NAME": "io.memoryd.daemon"}, tmp_path, 1)
    assert launchd == f"its log: {tmp_path}/Library/Logs/memoryd/memoryd.err.log"
    assert log_location({"INVOCATION_ID": "x"}, tmp_path, 1).endswith("-u memoryd.service")


async def test_damage_a_request_finds_stops_the_daemon_and_exits_74(tmp_path: Path) -> None:
    """A damaged database found by a request (not by the daemon's own jobs): the daemon is
    told (it then stops and exits 74, as for damage it finds itself), and the command that
    asked exits 74, through the quick path and the full one (issue 61.14)."""
    import asyncio

    from memoryd.cli import quick
    from memoryd.client import DaemonClient
    from memoryd.config import load_settings
    from memoryd.errors import MemorydError, StoreDamaged

    told: list[MemorydError] = []
    ops = _Replaced(StoreDamaged("database disk image is malformed"))

    async def provide() -> Any:
        return ops

    async def status() -> dict[str, Any]:
        return {}

    socket = tmp_path / "api.sock"
    server = ApiServer(socket, make_app(provide, status, None, "its log",
                                        on_damage=told.append))
    await server.start()
    try:
        with pytest.raises(SystemExit) as exited:
            await asyncio.to_thread(quick._call, str(socket), "me", "recall", {"query": "x"})
        assert exited.value.code == 74
        settings = load_settings(None, state_dir=str(tmp_path), sources=[])
        assert settings.socket_path == tmp_path / "memoryd.sock"
        socket.rename(settings.socket_path)
        client = DaemonClient(settings)
        try:
            with pytest.raises(StoreDamaged):
                await client.call("recall", {"query": "x"})
        finally:
            await client.close()
    finally:
        await server.stop()
    assert len(told) == 2 and all(e.damaged for e in told)
