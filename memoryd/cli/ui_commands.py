"""`memoryd ui`: the web viewer, from the running daemon or served by this command."""

from __future__ import annotations

import asyncio
import signal
import webbrowser
from typing import Any

import click

from memoryd.cli.common import config_option, main, run_async, settings_for
from memoryd.config import Settings


def _announce(url: str, *, browser: bool, serving_here: bool) -> None:
    opened = browser and webbrowser.open(url)
    click.echo(url)
    where = "served by this command until Ctrl-C" if serving_here else "served by the daemon"
    click.echo(f"memoryd viewer ({where}){': opened in your browser' if opened else ''}",
               err=True)


async def _from_daemon(settings: Settings) -> str | None:
    """The daemon's viewer address, or None when no daemon answers."""
    from memoryd.client import DaemonClient
    from memoryd.errors import DaemonUnreachable
    from memoryd.memory.opening import memory_user

    if not settings.socket_path.exists():
        return None
    client = DaemonClient(settings)
    try:
        answer = await client.call("open_ui", {"interface": "cli",
                                               "client_user": memory_user(settings)})
    except DaemonUnreachable:
        return None
    finally:
        await client.close()
    return str(answer["url"])


async def _serve_here(settings: Settings, port: int, browser: bool) -> None:
    from memoryd.api.registry import MemoryOps
    from memoryd.client import direct_ops
    from memoryd.clock import SystemClock
    from memoryd.status import collect_status
    from memoryd.ui.data import ViewerData
    from memoryd.ui.server import UiServer

    clock = SystemClock()
    async with direct_ops(settings, clock) as ops:
        async def provide() -> MemoryOps:
            return ops

        async def status() -> dict[str, Any]:
            return await collect_status(settings, clock, ops.memory)

        server = UiServer(ViewerData(settings, clock, provide, status), port=port,
                          idle_timeout=None)
        await server.start()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, lambda: asyncio.ensure_future(server.stop()))
        _announce(server.url, browser=browser, serving_here=True)
        await server.wait()


@main.command()
@click.option("--no-browser", is_flag=True, help="Print the address; do not open a browser.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The port when this command serves the viewer itself (0: any free one).")
@config_option
@click.pass_context
def ui(ctx: click.Context, no_browser: bool, port: int) -> None:
    """Open the web viewer: sessions, memories, what agents were given, the audit trail.

    The running daemon serves it (on 127.0.0.1, a port chosen at start); without a
    daemon this command serves it until Ctrl-C. The printed address carries a secret
    token that logs the browser in: keep it to yourself.
    """
    settings = settings_for(ctx)
    url = run_async(_from_daemon(settings))
    if url is not None:
        _announce(url, browser=not no_browser, serving_here=False)
        return
    run_async(_serve_here(settings, port, browser=not no_browser))
