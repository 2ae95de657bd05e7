"""Commands about the daemon itself: run, ingest, status, sessions, show, sync, doctor."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import structlog

from memoryd.cli import render
from memoryd.cli.common import (
    EX_NOT_FOUND,
    command_logging,
    config_option,
    fail,
    json_option,
    main,
    print_json,
    run_async,
    settings_for,
)
from memoryd.clock import SystemClock
from memoryd.config import Settings, load_settings, resolve_config_path
from memoryd.errors import EX_CONFIG, ConfigError
from memoryd.ingest.once import ingest_once
from memoryd.lifecycle.expiry import shown_as_of
from memoryd.names import AGENTS
from memoryd.store import queries
from memoryd.store.connection import connect

if TYPE_CHECKING:
    from memoryd.memory.privacy.redaction import ExtraMasks

# Each command imports what it alone needs: a command's start-up is part of its time
# (`ingest` should not load the memory backends, the embedders or the scheduler).


def _title(summary: str | None, width: int = 100) -> str | None:
    """The agent's own title of a session: the first line of its summary, clipped."""
    if not summary:
        return None
    line = next((x.strip().lstrip("#").strip() for x in summary.splitlines() if x.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


@main.command()
@config_option
@click.pass_context
def run(ctx: click.Context) -> None:
    """Run the daemon in the foreground until SIGTERM or SIGINT."""
    from memoryd.notify import Notifier
    from memoryd.service import Service

    settings = settings_for(ctx)

    async def _main() -> None:
        config = ctx.ensure_object(dict).get("config")
        service = Service(settings, SystemClock(), Notifier(),
                          reload=lambda: load_settings(config))
        service.install_signal_handlers()
        await service.run()

    run_async(_main())


@main.command()
@click.option("--once", is_flag=True, default=True,
              help="One full pass over every source, then exit (the default).")
@config_option
@click.pass_context
def ingest(ctx: click.Context, once: bool) -> None:
    """Read every transcript to its end once, then exit (`memoryd run` keeps following)."""
    # Ctrl-C stops the pass (exit 130) even when the shell started us with SIGINT ignored
    # (a job started with `&`): what was read is committed, the rest is read next time.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    settings = settings_for(ctx)
    clock = SystemClock()
    show_progress = sys.stderr.isatty()
    bar: Any = None

    def on_total(total: int) -> None:
        nonlocal bar
        if show_progress and total:
            bar = click.progressbar(length=total, label="ingesting", file=sys.stderr,
                                    show_pos=False, show_percent=True, show_eta=True)
            bar.__enter__()

    def progress(n_bytes: int) -> None:
        if bar is not None:
            bar.update(n_bytes)

    finished = False
    try:
        stats = run_async(ingest_once(settings, clock, on_total=on_total, progress=progress))
        finished = True
    finally:
        if bar is not None:
            if finished:  # an interrupted pass leaves the bar where it stopped
                # Partial last lines stay unread until complete: the pass itself is done.
                bar.update(max(0, bar.length - bar.pos))
            bar.__exit__(None, None, None)
    structlog.get_logger("memoryd").info(
        "ingest_done", files=stats.files, messages=stats.messages, bytes=stats.bytes_read
    )
    click.echo(f"stored {stats.messages} messages from {stats.files} files "
               f"({stats.bytes_read / 1e6:.1f} MB read)")


@main.command()
@json_option
@config_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Whether the daemon runs, what each source holds, and what is not stored yet."""
    from memoryd.status import collect_status

    settings = settings_for(ctx)
    report = run_async(collect_status(settings, SystemClock()))
    if as_json:
        print_json(report)
        return
    for line in render.status_lines(report, render.terminal_width(sys.stdout, os.environ)):
        click.echo(line)


@main.command()
@click.option("--status", "status_filter", type=click.Choice(["active", "paused", "ended"]),
              help="Only sessions with this status.")
@click.option("--source", type=click.Choice(AGENTS),
              help="Only sessions of this agent.")
@click.option("--all", "flat", is_flag=True,
              help="Subagents' sessions as rows of their own (by default they are counted"
                   " on their parent's, in SUB).")
@json_option
@config_option
@click.pass_context
def sessions(ctx: click.Context, status_filter: str | None, source: str | None, flat: bool,
             as_json: bool) -> None:
    """Every session, newest first, with how many messages are not yet in memory."""
    from memoryd.memory.privacy.redaction import sessions_shown
    from memoryd.store.injections import sessions_with_given

    settings = settings_for(ctx)

    async def _load() -> list[dict[str, Any]]:
        if not settings.database_path.exists():
            return []
        conn = await connect(settings.database_path, readonly=True)
        try:
            return sessions_shown(await sessions_with_given(
                conn, status=status_filter, source=source, flat=flat,
                stale_before=shown_as_of(SystemClock().now(), settings.stale_session_timeout)),
                settings.extra_masks())
        finally:
            await conn.close()

    rows = run_async(_load())
    if as_json:
        print_json(rows)
        return
    for line in render.session_lines(rows, render.terminal_width(sys.stdout, os.environ)):
        click.echo(line)


VIEWS = ("person", "model", "export", "raw")


@main.command()
@click.argument("session")
@click.option("--limit", type=click.IntRange(min=0), default=None,
              help="Show at most this many messages.")
@click.option("--offset", type=click.IntRange(min=0), default=0,
              help="Skip this many messages first.")
@click.option("--view", type=click.Choice(VIEWS), default="person", show_default=True,
              help="person: readable, secrets and personal data masked; model: one line a "
                   "message as memory would hold it (masked, tool noise clipped); export: "
                   "JSON lines (masked); raw: the text as stored.")
@json_option
@config_option
@click.pass_context
def show(ctx: click.Context, session: str, limit: int | None, offset: int, view: str,
         as_json: bool) -> None:
    """One session and its messages. SESSION is its id, the agent's session id, or a prefix."""
    settings = settings_for(ctx)
    found = run_async(_load_session(settings, session, limit, offset))
    if found is None:
        fail(f"no session matches {session[:80]!r} (see `memoryd sessions`)", EX_NOT_FOUND)
        return
    if view != "raw":
        _mask_session(found, settings.extra_masks())
    if as_json:
        print_json(found)
        return
    if view == "export":
        for m in found["messages"]:
            click.echo(json.dumps({k: m.get(k) for k in (
                "message_index", "timestamp", "role", "kind", "tool_name", "uuid", "content")},
                ensure_ascii=False, sort_keys=True))
        return
    width = render.terminal_width(sys.stdout, os.environ)
    lines = _model_lines(found) if view == "model" else _session_lines(found)
    for line in lines:
        click.echo(render.fit(line, width))


async def _load_session(settings: Settings, session: str, limit: int | None,
                        offset: int) -> dict[str, Any] | None:
    """The session `memoryd show` names, with its subagents, messages, summaries and the
    blocks it was given; None when there is none."""
    from memoryd.store.injections import injections_for

    if not settings.database_path.exists():
        return None
    conn = await connect(settings.database_path, readonly=True)
    try:
        as_of = shown_as_of(SystemClock().now(), settings.stale_session_timeout)
        found = await queries.find_session(conn, session, as_of)
        if found is None:
            return None
        found["subagents"] = [
            {k: row[k] for k in ("id", "external_id", "status", "message_count")}
            for row in await queries.subagent_sessions(conn, found["id"], as_of)]
        found["messages"] = await queries.session_messages(
            conn, found["id"], limit=limit, offset=offset)
        found["summaries"] = await queries.session_summaries(conn, found["id"])
        found["given"] = await injections_for(conn, [found["external_id"]])
        return found
    finally:
        await conn.close()


def _mask_session(found: dict[str, Any], masks: ExtraMasks) -> None:
    """Secrets, personal data and extra patterns masked in what `show` prints."""
    from memoryd.memory.privacy.redaction import readable_stored, shown

    for message in found["messages"]:
        message["content"] = shown(readable_stored(message["content"], message["kind"]),
                                   masks)
        if message.get("tool_input") is not None:
            message["tool_input"] = shown(readable_stored(message["tool_input"],
                                                          "tool_input"), masks)
    for summary in found["summaries"]:
        if isinstance(summary.get("content"), str):
            summary["content"] = shown(summary["content"], masks)
    if found.get("summary_markdown"):
        found["summary_markdown"] = shown(found["summary_markdown"], masks)


def _model_lines(found: dict[str, Any]) -> list[str]:
    """One line a message, as memory would hold it (`--view model`)."""
    from memoryd.lifecycle.segments import render_message
    from memoryd.store.sessions import StoredMessage

    lines = []
    for m in found["messages"]:
        line = render_message(StoredMessage(
            index=m["message_index"], role=m["role"], kind=m["kind"],
            content=m["content"], tool_name=m["tool_name"], uuid=m["uuid"],
            timestamp=None, tool_input=m.get("tool_input")), found.get("project"))
        if line:  # one line per message, as documented: a prompt's own lines joined
            lines.append(" ⏎ ".join(part for part in line.splitlines() if part.strip()))
    return lines


def _session_lines(found: dict[str, Any]) -> list[str]:
    """The session as a person reads it: its header, messages and the blocks given."""
    out = [f"session {found['id']} ({found['source']} {found['external_id'] or ''}) "
           f"{found['status']}"]
    title = _title(found.get("summary_markdown"))
    if title:
        out.append(f"title:      {title}")
    out += [f"project:    {found['project'] or '-'}",
            f"transcript: {found['transcript_path']}"]
    if found["subagents"]:
        out.append(f"subagents:  {len(found['subagents'])} (" + ", ".join(
            str(sub["id"]) for sub in found["subagents"]) + "; `memoryd show ID`)")
    out.append(f"messages:   {found['message_count']} ({found['unsynced_messages']} not yet"
               " in memory)")
    for m in found["messages"]:
        text = " ".join(m["content"].split())
        if len(text) > 200:
            text = text[:199] + "…"
        tool = f" {m['tool_name']}" if m["tool_name"] else ""
        out.append(f"[{m['message_index']}] {render.when(m['timestamp'])} {m['role']}{tool}:"
                   f" {text}")
    out.append(f"given by memoryd: {len(found['given'])} context blocks")
    for g in found["given"]:
        out.append(f"  {render.when(g['injected_at'])} {g['interface']} {g['event']}: "
                   f"{len(g['memory_ids'])} memories, {g['chars']} chars"
                   + (f" ({', '.join(g['memory_ids'][:5])}"
                      f"{', …' if len(g['memory_ids']) > 5 else ''})" if g["memory_ids"] else ""))
    return out


@main.command()
@click.argument("session", required=False)
@config_option
@click.pass_context
def sync(ctx: click.Context, session: str | None) -> None:
    """Save unsynced messages to memory now (all sessions, or SESSION)."""
    from memoryd.lifecycle.sync import sync_now
    from memoryd.process import tune_threads

    settings = settings_for(ctx)
    clock = SystemClock()

    tune_threads()  # as the daemon's own passes run
    report = run_async(sync_now(settings, clock, session))
    if report is None:
        fail(f"no session matches {(session or '')[:80]!r} (see `memoryd sessions`)",
             EX_NOT_FOUND)
        return
    click.echo(f"saved {report.segments_saved} segments ({report.messages_synced} messages) "
               f"from {report.sessions} sessions, {report.summaries_saved} summaries")
    if report.failed_sessions:
        fail(f"memory backend failed for sessions {report.failed_sessions}; nothing was "
              "skipped, run again later", 1)


@main.command("rebuild-memory")
@config_option
@click.pass_context
def rebuild_memory(ctx: click.Context) -> None:
    """Save every message memoryd holds into a new embedded memory (memory.db damaged,
    missing or empty): what still reads of the old one is kept, the file moved aside."""
    from memoryd.lifecycle.rebuild import rebuild_memory as rebuild
    from memoryd.lock import hold_lock
    from memoryd.process import tune_threads

    settings = settings_for(ctx)
    if settings.memory.backends != ["sqlite"]:
        fail("rebuild-memory rebuilds the embedded memory (memory.backends: [sqlite]); a"
             " chain's layers are mended by `memoryd memory`", EX_CONFIG)
    clock = SystemClock()
    tune_threads()
    with hold_lock(settings, "rebuild-memory", clock.now()):  # never beside a daemon
        report = run_async(rebuild(settings, clock))
    if report.moved_to:
        click.echo(f"kept {report.salvaged} memories that still read"
                   f" ({report.unreadable} rows unreadable) in {report.moved_to}.jsonl;"
                   f" the old file is {report.moved_to}")
    click.echo(f"saved {report.sync.segments_saved} segments ({report.sync.messages_synced}"
               f" messages) from {report.sync.sessions} sessions,"
               f" {report.sync.summaries_saved} summaries; {report.imported} memories"
               " no message holds imported from what still read")
    if report.sync.failed_sessions:
        fail(f"memory backend failed for sessions {report.sync.failed_sessions}; run"
             " `memoryd rebuild-memory` again to go on", 1)


@main.command()
@config_option
@click.option("--full", is_flag=True,
              help="SQLite's full integrity_check (slower) instead of quick_check.")
@click.pass_context
def doctor(ctx: click.Context, full: bool) -> None:
    """Check the installation: each check prints ok, warn or fail, with a fix."""
    from memoryd.doctor import run_checks
    from memoryd.service_units import ServiceManager

    obj: dict[str, Any] = ctx.ensure_object(dict)
    try:
        settings = load_settings(obj.get("config"))
    except ConfigError as exc:
        click.echo(f"fail  config: {exc}")
        fail("fix the setting named above", EX_CONFIG)
        return
    command_logging(ctx, settings)
    platform = {"linux": "linux", "darwin": "macos"}.get(sys.platform)
    manager = None
    if platform is not None:
        config_path, _ = resolve_config_path(obj.get("config"))
        manager = ServiceManager(settings, platform=platform, home=Path.home(),
                                 config=config_path.resolve() if config_path.exists() else None)
    checks = run_async(run_checks(settings, SystemClock(), manager, full=full))
    width = render.terminal_width(sys.stdout, os.environ)
    for check in checks:
        for line in render.wrap(f"{check.level:<5} {check.name}: {check.detail}", width,
                                " " * 6):
            click.echo(line)
        if check.fix and check.level != "ok":
            for line in render.wrap(f"      fix: {check.fix}", width, " " * 11):
                click.echo(line)
    failed = sum(c.level == "fail" for c in checks)
    warned = sum(c.level == "warn" for c in checks)
    click.echo(f"{len(checks)} checks: {failed} failed, {warned} warnings")
    if failed:
        sys.exit(1)
