"""`memoryd distill`: older sessions' saved conversation sent to the model, when asked."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import TYPE_CHECKING

import click

from memoryd.cli.common import config_option, fail, main, run_async, settings_for, when_option
from memoryd.clock import Clock, SystemClock
from memoryd.config import Settings
from memoryd.errors import EX_CONFIG

if TYPE_CHECKING:
    import aiosqlite

#: Seconds between two looks at the queue while the daemon works through it.
FOLLOW_EVERY = 1.0
#: Seconds after which following stops when the daemon sends nothing at all (it was
#: started without `memory.llm`), or has sent none of them for this long.
NOT_SENDING, NO_PROGRESS = 15.0, 300.0


@main.command()
@click.option("--since", required=True, callback=when_option,
              help="Sessions active since then (ISO date, '30d', '2 weeks ago').")
@click.option("--dry-run", is_flag=True,
              help="Count what would be sent and what it would cost; send nothing.")
@config_option
@click.pass_context
def distill(ctx: click.Context, since: datetime, dry_run: bool) -> None:
    """Send older sessions' saved conversation to the model (memory.llm): the facts,
    decisions, preferences and gotchas in it become `observation` memories. New
    conversation is distilled in the background without asking."""
    settings = settings_for(ctx)
    if not settings.memory.llm.enabled:
        fail("distillation is off: set memory.llm.provider (see docs/distillation.md)", EX_CONFIG)
        return
    run_async(_distill(settings, SystemClock(), since, dry_run))


async def _distill(settings: Settings, clock: Clock, since: datetime, dry_run: bool) -> None:
    from memoryd.distill.backlog import plan_backlog
    from memoryd.store.database import open_store
    from memoryd.store.distill_queue import enqueue_backlog, requeue_failed

    async with open_store(settings) as conn:
        if not dry_run:
            again = await requeue_failed(conn, since, clock.now())
            if again:
                click.echo(f"{again} segments whose answers failed before queued again")
        backlog = await plan_backlog(conn, settings, since)
        llm = settings.memory.llm
        days = backlog.tokens / llm.daily_tokens if llm.daily_tokens else float("inf")
        click.echo(f"{backlog.segments} segments of {backlog.sessions} sessions"
                   f" ({backlog.messages} messages) to send to {llm.provider}"
                   + (f" {llm.model}" if llm.model else "")
                   + f": at most about {backlog.tokens:,} tokens, {days:.1f} days of the daily"
                   f" budget ({llm.daily_tokens:,})"
                   + "; messages sent before are left out")
        if dry_run or not backlog.segments:
            return
        await enqueue_backlog(conn, backlog.entries, clock.now())
        ids = [e.segment_id for entries in backlog.entries.values() for e in entries]
        from memoryd.lock import read_lock_info

        holder = read_lock_info(settings.lock_path)
        try:
            if holder is not None and holder.command == "run":
                left = await _follow(conn, settings, ids)
                if left:
                    await _drain(conn, settings, clock, left)
            else:
                await _drain(conn, settings, clock, ids)
        except (KeyboardInterrupt, asyncio.CancelledError):
            click.echo("stopped following: what is left stays queued (the daemon sends it)")


async def _follow(conn: aiosqlite.Connection, settings: Settings,
                  ids: list[str]) -> list[str]:
    """The daemon sends them: its progress, until the last is done; what is left when
    the daemon stopped meanwhile (this command sends it then). Following ends, leaving
    them queued, when the daemon does not send them (started before `memory.llm` was
    set) or has sent none for a while (its budget spent, its provider down)."""
    from memoryd.lock import read_lock_info
    from memoryd.status import read_runtime_status
    from memoryd.store.distill_queue import unfinished_among

    assert ids
    began = last_progress = time.monotonic()
    with click.progressbar(length=len(ids), label="distilling (the daemon sends them)") as bar:
        done = 0
        while done < len(ids):
            left = len(await unfinished_among(conn, ids))
            if len(ids) - left > done:
                last_progress = time.monotonic()
            bar.update(len(ids) - left - done)
            done = len(ids) - left
            if not left:
                break
            holder = read_lock_info(settings.lock_path)
            if holder is None or holder.command != "run":
                return await unfinished_among(conn, ids)
            runtime = read_runtime_status(settings) or {}
            if "distill" not in runtime and (
                    time.monotonic() - began > NOT_SENDING):
                click.echo("\nthe running daemon does not send them: it was started before"
                           " memory.llm was set; restart it (they stay queued)", err=True)
                return []
            if time.monotonic() - last_progress > NO_PROGRESS:
                click.echo(f"\nnone sent for {NO_PROGRESS:.0f} s (see `memoryd status`: the"
                           " daily budget, the provider's last error); they stay queued and"
                           " the daemon goes on", err=True)
                return []
            await asyncio.sleep(FOLLOW_EVERY)
    return []



async def _drain(conn: aiosqlite.Connection, settings: Settings, clock: Clock,
                 ids: list[str]) -> None:
    """No daemon runs: send them from here, at the settings' rate and within the budget."""
    from memoryd.distill.providers import make_provider
    from memoryd.distill.worker import Distiller
    from memoryd.memory.opening import open_memory_backend
    from memoryd.store.distill_queue import unfinished_among

    backend = await open_memory_backend(settings, clock)
    provider = make_provider(settings.memory.llm, settings.distill_dir)
    distiller = Distiller(conn, backend, clock, settings, provider)
    stored = 0
    try:
        with click.progressbar(length=len(ids), label="distilling") as bar:
            done = 0
            while done < len(ids):
                report = await distiller.run()
                stored += report.stored
                left = len(await unfinished_among(conn, ids))
                bar.update(len(ids) - left - done)
                done = len(ids) - left
                if report.stopped in ("daily budget spent", "provider failed"):
                    break
                if left and not report.jobs:
                    await asyncio.sleep(FOLLOW_EVERY)
    finally:
        await distiller.close()
        await backend.close()
    click.echo(f"{stored} observations stored" + (
        f"; {len(ids) - done} segments left queued ({report.stopped}): the daemon sends"
        " them later" if done < len(ids) else ""))
