"""The `memoryd` command line.

Exit statuses mean something, and the systemd/launchd units rely on them:
0 done, 1 failed, 2 bad usage, 66 no such session, 69 a store or backend is
unavailable right now (locked, disk full), 75 another memoryd holds the state
directory, 78 bad configuration.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
import structlog

from daemon import __version__
from daemon.clock import SystemClock
from daemon.config import Settings, load_settings, resolve_config_path
from daemon.doctor import run_checks
from daemon.errors import (
    EX_ALREADY_RUNNING,
    EX_CONFIG,
    AlreadyRunningError,
    ConfigError,
    MemorydError,
)
from daemon.logging import configure_logging
from daemon.memory import RecallResult
from daemon.notify import Notifier
from daemon.service import Service, ingest_once, open_memory_backend, sync_now
from daemon.status import collect_status
from daemon.store import queries
from daemon.store.connection import connect
from daemon.timephrases import WhenError, parse_when
from daemon.units import Plan, ServiceManager, describe, execute

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

EX_NOT_FOUND = 66
EX_UNAVAILABLE = 69


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _fail(message: str, code: int) -> None:
    click.echo(f"memoryd: {message}", err=True)
    sys.exit(code)


def _settings(ctx: click.Context) -> Settings:
    """Load the settings once per command; a bad setting exits 78 with one line."""
    obj: dict[str, Any] = ctx.ensure_object(dict)
    if "settings" not in obj:
        try:
            obj["settings"] = load_settings(obj.get("config"))
        except ConfigError as exc:
            _fail(str(exc), EX_CONFIG)
        settings: Settings = obj["settings"]
        configure_logging(settings.log_level, settings.log_format)
    result: Settings = obj["settings"]
    return result


def _remember_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)["config"] = value


def config_option(func: F) -> F:
    """`--config PATH`, accepted before or after the command name."""
    return click.option(
        "--config", "config", metavar="PATH", expose_value=False, is_eager=True,
        callback=_remember_config,
        help="Settings file (default: $MEMORYD_CONFIG, else ~/.config/memoryd/config.yaml).",
    )(func)


json_option = click.option("--json", "as_json", is_flag=True, help="Print stable JSON.")


def _print_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


class _Group(click.Group):
    """Turns memoryd's own errors into one line on stderr and a meaningful exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            _fail(str(exc), EX_CONFIG)
        except AlreadyRunningError as exc:
            _fail(str(exc), EX_ALREADY_RUNNING)
        except MemorydError as exc:
            _fail(str(exc), EX_UNAVAILABLE if exc.transient else 1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memoryd")
@config_option
def main() -> None:
    """memoryd: a memory for AI coding agents that survives crashes, compactions and reboots.

    It follows Claude Code, Codex and Gemini CLI transcripts into a local SQLite
    store, exactly once, whatever happens to the agents or to memoryd itself.
    """


@main.command()
@config_option
@click.pass_context
def run(ctx: click.Context) -> None:
    """Run the daemon in the foreground until SIGTERM or SIGINT."""
    settings = _settings(ctx)

    async def _main() -> None:
        config = ctx.ensure_object(dict).get("config")
        service = Service(settings, SystemClock(), Notifier(),
                          reload=lambda: load_settings(config))
        service.install_signal_handlers()
        await service.run()

    try:
        _run(_main())
    except AlreadyRunningError as exc:
        _fail(str(exc), EX_ALREADY_RUNNING)


@main.command()
@click.option("--once", is_flag=True, default=True,
              help="One full pass over every source, then exit (the default).")
@config_option
@click.pass_context
def ingest(ctx: click.Context, once: bool) -> None:
    """Read every transcript to its end once, then exit (`memoryd run` keeps following)."""
    settings = _settings(ctx)
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

    try:
        stats = _run(ingest_once(settings, clock, on_total=on_total, progress=progress))
    except AlreadyRunningError as exc:
        _fail(str(exc), EX_ALREADY_RUNNING)
    finally:
        if bar is not None:
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
    settings = _settings(ctx)
    report = _run(collect_status(settings, SystemClock()))
    if as_json:
        _print_json(report)
        return
    d = report["daemon"]
    if d["running"]:
        click.echo(f"daemon: running (pid {d['pid']}, up {_duration(d['uptime_seconds'])})")
    elif d["pid"]:
        click.echo(f"daemon: not running; `memoryd {d['command']}` holds the lock (pid {d['pid']})")
    else:
        click.echo("daemon: not running")
    click.echo(f"state:  {report['state_dir']}")
    db = report["database"]
    click.echo(f"store:  {db['path']} ({_size(db['size_bytes'])})" if db["exists"]
               else f"store:  {db['path']} (not created yet)")
    for s in report["sources"]:
        where = "" if s["exists"] else " (not found)"
        state = "" if s["enabled"] else " [disabled]"
        click.echo(f"source {s['kind']:<6} {s['root']}{where}{state}: {s['files']} files, "
                   f"{s['sessions']} sessions, {s['messages']} messages")
    memory = report["memory"]
    state = "available" if memory["available"] else f"unavailable ({memory.get('detail', '?')})"
    click.echo(f"memory: {memory['backend']} {memory['path']}: {state}")
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(report["sessions_by_status"].items()))
    click.echo(f"sessions: {report['sessions']}" + (f" ({by_status})" if by_status else ""))
    click.echo(f"messages: {report['messages']} stored, {report['unsynced_messages']} "
               "not yet in memory")
    click.echo(f"ingestion lag: {_size(report['ingestion_lag_bytes'])} not yet stored")
    if report["rejected_lines"]:
        click.echo(f"rejected lines: {report['rejected_lines']} (kept in table rejected_lines)")
    if report["last_error"]:
        click.echo(f"last error: {report['last_error']} at {report['last_error_at']}")


@main.command()
@click.option("--status", "status_filter", type=click.Choice(["active", "paused", "ended"]),
              help="Only sessions with this status.")
@click.option("--source", type=click.Choice(["claude", "codex", "gemini"]),
              help="Only sessions of this agent.")
@json_option
@config_option
@click.pass_context
def sessions(ctx: click.Context, status_filter: str | None, source: str | None,
             as_json: bool) -> None:
    """Every session, newest first, with how many messages are not yet in memory."""
    settings = _settings(ctx)

    async def _load() -> list[dict[str, Any]]:
        if not settings.database_path.exists():
            return []
        conn = await connect(settings.database_path, readonly=True)
        try:
            return await queries.list_sessions(conn, status=status_filter, source=source)
        finally:
            await conn.close()

    rows = _run(_load())
    if as_json:
        _print_json(rows)
        return
    if not rows:
        click.echo("no sessions yet")
        return
    click.echo(f"{'ID':>5}  {'SOURCE':<6}  {'STATUS':<6}  {'MSGS':>6}  {'UNSYNCED':>8}  "
               f"{'LAST MESSAGE':<24}  PROJECT")
    for r in rows:
        click.echo(f"{r['id']:>5}  {r['source']:<6}  {r['status']:<6}  {r['message_count']:>6}  "
                   f"{r['unsynced_messages']:>8}  {r['last_message_at'] or '-':<24}  "
                   f"{r['project'] or '-'}")


@main.command()
@click.argument("session")
@click.option("--limit", type=click.IntRange(min=0), default=None,
              help="Show at most this many messages.")
@click.option("--offset", type=click.IntRange(min=0), default=0,
              help="Skip this many messages first.")
@json_option
@config_option
@click.pass_context
def show(ctx: click.Context, session: str, limit: int | None, offset: int,
         as_json: bool) -> None:
    """One session and its messages. SESSION is its id, the agent's session id, or a prefix."""
    settings = _settings(ctx)

    async def _load() -> dict[str, Any] | None:
        if not settings.database_path.exists():
            return None
        conn = await connect(settings.database_path, readonly=True)
        try:
            found = await queries.find_session(conn, session)
            if found is None:
                return None
            found["messages"] = await queries.session_messages(
                conn, found["id"], limit=limit, offset=offset)
            found["summaries"] = await queries.session_summaries(conn, found["id"])
            return found
        finally:
            await conn.close()

    found = _run(_load())
    if found is None:
        _fail(f"no session matches {session!r} (see `memoryd sessions`)", EX_NOT_FOUND)
        return
    if as_json:
        _print_json(found)
        return
    click.echo(f"session {found['id']} ({found['source']} {found['external_id'] or ''}) "
               f"{found['status']}")
    click.echo(f"project:    {found['project'] or '-'}")
    click.echo(f"transcript: {found['transcript_path']}")
    click.echo(f"messages:   {found['message_count']} ({found['unsynced_messages']} not yet in "
               "memory)")
    for m in found["messages"]:
        text = m["content"].replace("\n", " ")
        if len(text) > 200:
            text = text[:199] + "…"
        tool = f" {m['tool_name']}" if m["tool_name"] else ""
        click.echo(f"[{m['message_index']}] {m['timestamp'] or '-'} {m['role']}{tool}: {text}")


def _size(n_bytes: int) -> str:
    value = float(n_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _when(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_when(value, SystemClock().now())
    except WhenError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _project(value: str | None) -> str | None:
    if value is None:
        return None
    return os.path.abspath(os.path.expanduser(value)).rstrip("/") or "/"


def _iso_or_none(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment else None


def result_json(result: RecallResult) -> dict[str, Any]:
    """One recall result as stable JSON: content, score and full provenance."""
    p = result.provenance
    return {
        "memory_id": result.memory_id,
        "type": result.type.value,
        "content": result.content,
        "score": round(result.score, 6),
        "importance": result.importance,
        "project": result.project,
        "tags": list(result.tags),
        "created_at": _iso_or_none(result.created_at),
        "provenance": {
            "session_id": p.session_id,
            "session_external_id": p.session_external_id,
            "source": p.source,
            "project": p.project,
            "first_index": p.first_index,
            "last_index": p.last_index,
            "message_uuids": list(p.message_uuids),
            "started_at": _iso_or_none(p.started_at),
            "ended_at": _iso_or_none(p.ended_at),
        },
    }


@main.command()
@click.argument("query", required=False)
@click.option("--project", help="Prefer and keep this project's memories (its directory).")
@click.option("--all-projects", is_flag=True, help="Search every project.")
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--since", callback=_when, help="Only memories from then on (ISO date, 'yesterday',"
              " '2 weeks ago').")
@click.option("--until", callback=_when, help="Only memories before then.")
@click.option("--stdin", "from_stdin", is_flag=True,
              help="Read one query per line; print one JSON list per line (needs --json).")
@json_option
@config_option
@click.pass_context
def recall(ctx: click.Context, query: str | None, project: str | None, all_projects: bool,
           limit: int, since: datetime | None, until: datetime | None, from_stdin: bool,
           as_json: bool) -> None:
    """Find memories for QUERY, best first, with where each came from."""
    if from_stdin and not as_json:
        raise click.UsageError("--stdin prints JSON lines: add --json")
    if from_stdin == (query is not None):
        raise click.UsageError("give a QUERY or --stdin, not both" if query is not None
                               else "missing QUERY (or --stdin)")
    settings = _settings(ctx)
    wanted_project = _project(project)

    async def _recall() -> None:
        backend = await open_memory_backend(settings, SystemClock())
        try:
            async def one(text: str) -> list[RecallResult]:
                return await backend.recall(text, project=wanted_project, limit=limit,
                                            since=since, until=until,
                                            all_projects=all_projects)
            if from_stdin:
                for line in sys.stdin:
                    results = await one(line.rstrip("\n"))
                    click.echo(json.dumps([result_json(r) for r in results],
                                          ensure_ascii=False, sort_keys=True))
                return
            assert query is not None
            results = await one(query)
            if as_json:
                _print_json([result_json(r) for r in results])
                return
            if not results:
                click.echo("no memories found")
            for r in results:
                p = r.provenance
                where = f"session {p.session_id}" if p.session_id is not None else "explicit"
                if p.first_index is not None:
                    where += f" messages {p.first_index}-{p.last_index}"
                when = _iso_or_none(p.ended_at or r.created_at) or "?"
                click.echo(f"[{r.score:.3f}] {r.type.value} {when[:16]} {where}"
                           f"{' ' + r.project if r.project else ''}")
                text = r.content.strip().replace("\n", "\n    ")
                click.echo("    " + (text if len(text) <= 600 else text[:599] + "…"))
        finally:
            await backend.close()

    _run(_recall())


@main.command()
@click.argument("session", required=False)
@config_option
@click.pass_context
def sync(ctx: click.Context, session: str | None) -> None:
    """Save unsynced messages to memory now (all sessions, or SESSION)."""
    settings = _settings(ctx)
    clock = SystemClock()

    report = _run(sync_now(settings, clock, session))
    if report is None:
        _fail(f"no session matches {session!r} (see `memoryd sessions`)", EX_NOT_FOUND)
        return
    click.echo(f"saved {report.segments_saved} segments ({report.messages_synced} messages) "
               f"from {report.sessions} sessions, {report.summaries_saved} summaries")
    if report.failed_sessions:
        _fail(f"memory backend failed for sessions {report.failed_sessions}; nothing was "
              "skipped, run again later", 1)


@main.group()
def service() -> None:
    """Install memoryd as a user service (systemd on Linux, launchd on macOS) and manage it."""


def _manager(ctx: click.Context) -> ServiceManager:
    settings = _settings(ctx)
    platform = {"linux": "linux", "darwin": "macos"}.get(sys.platform)
    if platform is None:
        _fail(f"memoryd service supports Linux and macOS, not {sys.platform}", 1)
    config_path, _required = resolve_config_path(ctx.find_root().obj.get("config")
                                                 if ctx.find_root().obj else None)
    config = config_path.resolve() if config_path.exists() else None
    return ServiceManager(settings, platform=str(platform), home=Path.home(), config=config)


def _carry_out(plan: Plan, dry_run: bool, *, tolerate_first_failure: bool = False) -> None:
    if dry_run:
        click.echo(describe(plan))
        return
    failure = execute(plan, tolerate_first_failure=tolerate_first_failure)
    for path in plan.write:
        click.echo(f"wrote {path}")
    for path in plan.remove:
        click.echo(f"removed {path}")
    for note in plan.notes:
        click.echo(note)
    if failure is not None:
        _fail(f"`{' '.join(failure.command)}` failed ({failure.returncode}): "
              f"{failure.output or 'no output'}", EX_UNAVAILABLE)
    for command in plan.commands:
        click.echo(f"ran {' '.join(command)}")


dry_run_option = click.option("--dry-run", is_flag=True,
                              help="Print the file and the commands; change nothing.")


@service.command("install")
@dry_run_option
@config_option
@click.pass_context
def service_install(ctx: click.Context, dry_run: bool) -> None:
    """Write the unit with this memoryd's paths, then enable and start it."""
    _carry_out(_manager(ctx).install(), dry_run, tolerate_first_failure=sys.platform == "darwin")


@service.command("uninstall")
@dry_run_option
@config_option
@click.pass_context
def service_uninstall(ctx: click.Context, dry_run: bool) -> None:
    """Stop and remove the unit; stored messages and memories stay where they are."""
    _carry_out(_manager(ctx).uninstall(), dry_run, tolerate_first_failure=True)


def _simple_action(action: str, doc: str) -> None:
    @service.command(action, help=doc)
    @dry_run_option
    @config_option
    @click.pass_context
    def command(ctx: click.Context, /, dry_run: bool, **options: Any) -> None:
        plan = _manager(ctx).simple(action, follow=bool(options.get("follow")))
        if dry_run:
            click.echo(describe(plan))
            return
        code = subprocess.call(plan.commands[0])
        if code != 0:
            sys.exit(code)

    if action == "logs":
        click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")(command)


_simple_action("status", "What the service manager says about memoryd.")
_simple_action("start", "Start the installed service.")
_simple_action("stop", "Stop the service (it finishes the work in hand first).")
_simple_action("logs", "The service's recent log lines.")


@main.command()
@config_option
@click.pass_context
def doctor(ctx: click.Context) -> None:
    """Check the installation: each check prints ok, warn or fail, with a fix."""
    obj: dict[str, Any] = ctx.ensure_object(dict)
    try:
        settings = load_settings(obj.get("config"))
    except ConfigError as exc:
        click.echo(f"fail  config: {exc}")
        _fail("fix the setting named above", EX_CONFIG)
        return
    configure_logging("warning", settings.log_format)
    platform = {"linux": "linux", "darwin": "macos"}.get(sys.platform)
    manager = None
    if platform is not None:
        config_path, _ = resolve_config_path(obj.get("config"))
        manager = ServiceManager(settings, platform=platform, home=Path.home(),
                                 config=config_path.resolve() if config_path.exists() else None)
    checks = _run(run_checks(settings, SystemClock(), manager))
    for check in checks:
        click.echo(f"{check.level:<5} {check.name}: {check.detail}")
        if check.fix and check.level != "ok":
            click.echo(f"      fix: {check.fix}")
    failed = sum(c.level == "fail" for c in checks)
    warned = sum(c.level == "warn" for c in checks)
    click.echo(f"{len(checks)} checks: {failed} failed, {warned} warnings")
    if failed:
        sys.exit(1)
