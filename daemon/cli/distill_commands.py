"""`memoryd distill`: older sessions' saved conversation sent to the model, when asked."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING

import click

from daemon.cli.common import config_option, fail, main, run_async, settings_for, when_option
from daemon.clock import Clock, SystemClock
from daemon.config import Settings
from daemon.errors import EX_CONFIG

if TYPE_CHECKING:
    import aiosqlite

#: Seconds between two looks at the queue while the daemon works through it.
FOLLOW_EVERY = 1.0


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
        fail("distillation is off: set memory.llm.provider (see the README's"
             " \"Distillation\")", EX_CONFIG)
        return
    run_async(_distill(settings, SystemClock(), since, dry_run))


async def _distill(settings: Settings, clock: Clock, since: datetime, dry_run: bool) -> None:
    from daemon.distill.backlog import plan_backlog
    from daemon.store.distill_queue import enqueue_backlog
    from daemon.store.opening import open_store

    async with open_store(settings) as conn:
        backlog = await plan_backlog(conn, settings, since)
        llm = settings.memory.llm
        days = backlog.tokens / llm.daily_tokens if llm.daily_tokens else float("inf")
        click.echo(f"{backlog.segments} segments of {backlog.sessions} sessions"
                   f" ({backlog.messages} messages) to send to {llm.provider}"
                   + (f" {llm.model}" if llm.model else "")
                   + f": at most about {backlog.tokens:,} tokens, {days:.1f} days of the daily"
                   f" budget ({llm.daily_tokens:,})"
                   + (f"; {backlog.known} segments were queued before" if backlog.known
                      else ""))
        if dry_run or not backlog.segments:
            return
        await enqueue_backlog(conn, backlog.entries, clock.now())
        ids = [e.segment_id for entries in backlog.entries.values() for e in entries]
        from daemon.lock import read_lock_info

        holder = read_lock_info(settings.lock_path)
        try:
            if holder is not None and holder.command == "run":
                await _follow(conn, ids)
            else:
                await _drain(conn, settings, clock, ids)
        except (KeyboardInterrupt, asyncio.CancelledError):
            click.echo("stopped following: what is left stays queued (the daemon sends it)")


async def _follow(conn: aiosqlite.Connection, ids: list[str]) -> None:
    """The daemon sends them: its progress, until the last is done."""
    from daemon.store.distill_queue import waiting_among

    assert ids
    with click.progressbar(length=len(ids), label="distilling (the daemon sends them)") as bar:
        done = 0
        while done < len(ids):
            left = await waiting_among(conn, ids)
            bar.update(len(ids) - left - done)
            done = len(ids) - left
            if left:
                await asyncio.sleep(FOLLOW_EVERY)


async def _drain(conn: aiosqlite.Connection, settings: Settings, clock: Clock,
                 ids: list[str]) -> None:
    """No daemon runs: send them from here, at the settings' rate and within the budget."""
    from daemon.distill.providers import make_provider
    from daemon.distill.worker import Distiller
    from daemon.memory.opening import open_memory_backend
    from daemon.store.distill_queue import waiting_among

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
                left = await waiting_among(conn, ids)
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
