"""Commands about memories: recall, remember, correct, forget, context, export, import.

Recall, context, remember, correct, forget and show-memory go through the
daemon's API when it runs (it is the one writer of its stores) and open the
stores directly when it does not (`memoryd.client`). Export and import work on
the store directly: an export is a read, and an import may be larger than an API
request may be.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from memoryd.cli import render
from memoryd.cli.common import (
    EX_CANTCREAT,
    EX_DATAERR,
    EX_NOT_FOUND,
    agent_callback,
    agent_option,
    config_option,
    fail,
    iso_or_none,
    json_option,
    main,
    print_json,
    project_path,
    run_async,
    settings_for,
    when_option,
)
from memoryd.client import MemoryClient
from memoryd.clock import SystemClock, utc_text
from memoryd.config import Settings
from memoryd.domain.core import CONFIRM_EVERYTHING
from memoryd.errors import ApiError, BackendDamaged
from memoryd.files import atomic_writer
from memoryd.memory import Capability, MemoryBackend, MemoryType, require
from memoryd.memory.backends.gateway import call_events as gateway_calls
from memoryd.memory.backends.sqlite.salvage import readable_memories
from memoryd.memory.export_format import record_to_memory
from memoryd.memory.models import visible_to
from memoryd.memory.opening import open_memory_backend
from memoryd.memory.recall.context import DEFAULT_BUDGET, MIN_BUDGET
from memoryd.store import audit
from memoryd.store.database import open_store

T = TypeVar("T")


@main.command()
@click.argument("query", required=False)
@click.option("--project", help="Prefer and keep this project's memories (its directory).")
@click.option("--all-projects", is_flag=True, help="Search every project.")
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--since", callback=when_option,
              help="Only memories from then on (ISO date, 'yesterday', '2 weeks ago').")
@click.option("--until", callback=when_option, help="Only memories before then.")
@click.option("--as-of", "as_of", callback=when_option,
              help="Read the query's own time words ('last week', 'two days ago') as said"
                   " then, not now.")
@click.option("--stdin", "from_stdin", is_flag=True,
              help="Read one query per line; print one JSON list per line (needs --json).")
@click.option("--type", "kinds", multiple=True,
              type=click.Choice([t.value for t in MemoryType]),
              help="Only memories of this type (again for more): session_digest, fact, ...")
@agent_option
@json_option
@config_option
@click.pass_context
def recall(ctx: click.Context, query: str | None, project: str | None, all_projects: bool,
           limit: int, since: datetime | None, until: datetime | None,
           as_of: datetime | None, from_stdin: bool, kinds: tuple[str, ...], agent: str | None,
           as_json: bool) -> None:
    """Find memories for QUERY, best first, with where each came from."""
    if from_stdin and not as_json:
        raise click.UsageError("--stdin prints JSON lines: add --json")
    if from_stdin == (query is not None):
        raise click.UsageError("give a QUERY or --stdin, not both" if query is not None
                               else "missing QUERY (or --stdin)")
    if query is not None and not query.strip():
        raise click.UsageError("QUERY is empty: say what to look for")
    settings = settings_for(ctx)
    scope = {"project": project_path(project), "all_projects": all_projects, "limit": limit,
             "since": iso_or_none(since), "until": iso_or_none(until),
             **({"as_of": iso_or_none(as_of)} if as_of else {}),
             **({"agent": agent} if agent else {}), **({"types": list(kinds)} if kinds else {})}

    async def _recall(client: MemoryClient) -> None:
        async def one(text: str) -> list[dict[str, Any]]:
            found = await client.call("recall", {**scope, "query": text})
            return found["results"]  # type: ignore[no-any-return]

        if from_stdin:
            for line in sys.stdin:
                results = await one(line.rstrip("\n"))
                # ASCII: a line is one answer even to readers that split on U+2028.
                click.echo(json.dumps(results, ensure_ascii=True, sort_keys=True))
            return
        assert query is not None
        _print_results(await one(query), as_json, query)

    with_client(settings, _recall)


def _audit_cli(settings: Settings, action: str, count: int) -> None:
    """An audit record for a command that opened the stores itself (export, import)."""

    async def write() -> None:
        async with open_store(settings) as conn:
            await audit.record(conn, audit.AuditEvent(interface="cli", action=action,
                                                      count=count), SystemClock().now())

    run_async(write())


async def _with_backend(settings: Settings, work: Callable[[MemoryBackend], Awaitable[T]]) -> T:
    backend = await open_memory_backend(settings, SystemClock())
    try:
        return await work(backend)
    finally:
        await backend.close()




def with_client(settings: Settings, work: Callable[[MemoryClient], Awaitable[T]]) -> T:
    """Run `work` with a client of the daemon's API (the stores directly when none runs);
    a refused request exits with one line and a meaningful status."""

    async def go() -> T:
        async with MemoryClient(settings, SystemClock(), interface="cli") as client:
            return await work(client)

    try:
        return run_async(go())
    except ApiError as exc:
        fail(str(exc), render.EXIT_FOR_STATUS.get(exc.status, 1))
        raise AssertionError("fail exits") from None


def call(settings: Settings, operation: str, args: dict[str, Any]) -> dict[str, Any]:
    return with_client(settings, lambda client: client.call(operation, args))


def _print_memory(memory: dict[str, Any]) -> None:
    state = "live"
    if memory.get("deleted_at"):
        state = "deleted"
    elif memory.get("superseded_by"):
        state = f"superseded by {memory['superseded_by']}"
    click.echo(f"{memory['id']}  {memory['type']}  importance {memory['importance']:.2f}"
               f"  {state}")
    click.echo(f"  created {memory['created_at']}"
               + (f"  project {memory['project']}" if memory.get("project") else "")
               + (f"  tags {', '.join(memory['tags'])}" if memory.get("tags") else ""))
    if memory.get("reason"):
        click.echo(f"  reason: {memory['reason']}")
    click.echo("  " + str(memory["content"]).strip().replace("\n", "\n  "))


@main.command()
@click.argument("text")
@click.option("--project", help="Tie the memory to this project (its directory).")
@click.option("--tag", "tags", multiple=True, help="A tag; repeat for more.")
@click.option("--importance", type=click.FloatRange(0.0, 1.0),
              help="0..1; explicit facts default to 0.9 and never decay.")
@click.option("--type", "kind", type=click.Choice(["fact", "project_context"]), default="fact",
              show_default=True)
@click.option("--private", is_flag=True,
              help="Only the agent named by --agent may recall it (needs --agent).")
@agent_option
@json_option
@config_option
@click.pass_context
def remember(ctx: click.Context, text: str, project: str | None, tags: tuple[str, ...],
             importance: float | None, kind: str, private: bool, agent: str | None,
             as_json: bool) -> None:
    """Keep TEXT as an explicit fact, recalled prominently and never forgotten by age."""
    settings = settings_for(ctx)
    if not text.strip():
        raise click.BadParameter("the text to remember is empty", param_hint="TEXT")
    if private and agent is None:
        raise click.UsageError("--private needs --agent: the agent the memory is private to")
    memory = call(settings, "remember", {
        "content": text.strip(), "type": kind, "importance": importance,
        "project": project_path(project), "tags": list(tags), "private": private,
        **({"agent": agent} if agent else {})})["memory"]
    if as_json:
        print_json(memory)
    else:
        click.echo(f"remembered {memory['id']}")


@main.command()
@click.argument("args", nargs=-1, metavar="[MEMORY_ID] NEW_TEXT")
@click.option("--query", help="Correct the best match for this query instead of an ID.")
@click.option("--reason", help="Why it changed (kept for the audit trail).")
@json_option
@config_option
@click.pass_context
def correct(ctx: click.Context, args: tuple[str, ...], query: str | None, reason: str | None,
            as_json: bool) -> None:
    """Supersede memory MEMORY_ID (or the best match for --query) with NEW_TEXT.

    The old memory stays for audit; recall returns only the latest version.
    """
    settings = settings_for(ctx)
    if len(args) != (1 if query is not None else 2):
        raise click.UsageError("give MEMORY_ID NEW_TEXT, or --query Q NEW_TEXT")
    memory_id, new_text = (None, args[0]) if query is not None else args
    if not new_text.strip():
        raise click.BadParameter("the corrected text is empty", param_hint="NEW_TEXT")

    done = call(settings, "correct", {"memory_id": memory_id, "query": query,
                                      "content": new_text, "reason": reason})
    _note_copies(done, "correct")
    if as_json:
        print_json(done["memory"])
    else:
        click.echo(f"corrected {done['replaced']}: the new version is {done['memory']['id']}")


@main.command()
@click.argument("memory_id", required=False)
@click.option("--session", help="Forget every memory of this session (id or agent session id).")
@click.option("--project", help="Forget every memory of this project.")
@click.option("--all", "everything", is_flag=True, help="Forget every memory (needs --yes).")
@click.option("--everything-about", "user", metavar="USER",
              help="Delete for good everything memoryd keeps about USER (needs --yes): "
                   "memories in every layer, their vectors, saves waiting in the outbox, "
                   "and the archived text of this daemon's transcripts when USER is its user.")
@click.option("--yes", is_flag=True, help="Confirm --all or --everything-about.")
@click.option("--hard", is_flag=True,
              help="Delete the content itself, leaving only an audit record of what was "
                   "deleted when.")
@config_option
@click.pass_context
def forget(ctx: click.Context, memory_id: str | None, session: str | None, project: str | None,
           everything: bool, user: str | None, yes: bool, hard: bool) -> None:
    """Forget MEMORY_ID, or in bulk by --session, --project or --all; never recalled again."""
    settings = settings_for(ctx)
    chosen = [memory_id is not None, session is not None, project is not None, everything,
              user is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of MEMORY_ID, --session, --project, --all,"
                               " --everything-about")
    if (everything or user is not None) and not yes:
        raise click.UsageError("this forgets every memory: add --yes to confirm")
    if user is not None:
        _forget_user(settings, user)
        return

    done = call(settings, "forget", {
        "memory_id": memory_id, "session": session, "project": project_path(project),
        "all": everything, "hard": hard,
        **({"confirm": CONFIRM_EVERYTHING} if everything else {})})
    count = int(done["forgotten"])
    _note_copies(done, "forget")
    if memory_id is not None and count == 0:
        fail(f"no memory {memory_id} to forget", EX_NOT_FOUND)
    how = "deleted (hard)" if hard else "forgotten"
    click.echo(f"{count} {'memory' if count == 1 else 'memories'} {how}")


def _forget_user(settings: Settings, user: str) -> None:
    if not user.strip():
        raise click.UsageError("--everything-about needs a user name")
    done = call(settings, "forget_user", {"user": user, "confirm": CONFIRM_EVERYTHING})
    click.echo(f"everything about {user}: {done['forgotten']} memory versions deleted (hard)"
               f" in every layer, {done['outbox_saves_dropped']} waiting saves dropped")
    archive = done.get("archive")
    if archive is not None:
        click.echo(f"archive: the text of {archive['messages']} messages, {archive['summaries']}"
                   f" summaries and {archive['rejected_lines']} rejected lines removed"
                   f" ({archive['sessions']} sessions)")
    else:
        click.echo("archive: this daemon's transcripts are not theirs; nothing to remove")
    _note_copies(done, "forget")


def _note_copies(done: dict[str, Any], action: str) -> None:
    for layer in done.get("remains_in", []):
        click.echo(f"note: the {layer} layer cannot {action}; its copy remains as it was",
                   err=True)


@main.command("show-memory")
@click.argument("memory_id")
@click.option("--history", is_flag=True, help="The whole correction chain, oldest first.")
@json_option
@config_option
@click.pass_context
def show_memory(ctx: click.Context, memory_id: str, history: bool, as_json: bool) -> None:
    """One memory with its provenance; --history shows what it corrected and was corrected by."""
    settings = settings_for(ctx)

    # A person opening a memory is a real use (`ranking`); listing it in recall is not.
    found = call(settings, "get_memory", {"memory_id": memory_id})
    memories = found["history"] if history else [found["memory"]]
    if as_json:
        print_json(memories if history else memories[0])
        return
    for memory in memories:
        _print_memory(memory)


@main.command("recall-temporal")
@click.argument("since", callback=when_option)
@click.option("--until", callback=when_option, help="Until then (default: now).")
@click.option("--query", default="", help="Only memories matching this query.")
@click.option("--project", help="Prefer and keep this project's memories.")
@click.option("--all-projects", is_flag=True, help="Search every project.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@json_option
@config_option
@click.pass_context
def recall_temporal(ctx: click.Context, since: datetime, until: datetime | None, query: str,
                    project: str | None, all_projects: bool, limit: int,
                    as_json: bool) -> None:
    """What was learned since SINCE ('last week', 'yesterday', '2026-11-01'), oldest first."""
    settings = settings_for(ctx)
    found = call(settings, "recall_temporal", {
        "query": query, "project": project_path(project), "all_projects": all_projects,
        "since": iso_or_none(since), "until": iso_or_none(until), "limit": limit})
    _print_results(found["results"], as_json)


@main.command()
@click.option("--query", default="", help="What the prompt is about (default: the most "
              "important memories).")
@click.option("--project", help="The project the prompt is for (its directory).")
@click.option("--budget", type=click.IntRange(min=MIN_BUDGET), default=DEFAULT_BUDGET,
              show_default=True, help="Estimated tokens the block may use.")
@agent_option
@json_option
@config_option
@click.pass_context
def context(ctx: click.Context, query: str, project: str | None, budget: int,
            agent: str | None, as_json: bool) -> None:
    """A <memory_context> block of the most relevant memories for a prompt, within a budget."""
    settings = settings_for(ctx)
    block = call(settings, "context", {"query": query, "project": project_path(project),
                                       "budget": budget, **({"agent": agent} if agent else {})})
    if as_json:
        print_json({key: block[key] for key in ("text", "tokens", "budget",
                                                "dropped_duplicates", "dropped_for_budget",
                                                "items")})
    else:
        click.echo(block["text"])


@main.command()
@click.option("--project", help="The project's directory (default: the current one).")
@agent_option
@json_option
@config_option
@click.pass_context
def briefing(ctx: click.Context, project: str | None, agent: str | None,
             as_json: bool) -> None:
    """What a new session in a project is told at its start: the project briefing, as the
    session-start hook gives it (nothing is recorded as given)."""
    settings = settings_for(ctx)
    where = project_path(project) if project is not None else os.getcwd()
    found = call(settings, "briefing", {"cwd": where, **({"agent": agent} if agent else {})})
    if as_json:
        print_json({key: found[key] for key in ("text", "project", "memory_ids", "chars")})
    elif found["text"]:
        click.echo(found["text"])
    else:
        click.echo(f"nothing to tell a new session in {found['project'] or where}", err=True)


@main.command("export")
@click.option("--project", help="Only this project's memories.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to FILE atomically instead of standard output (a new file; an"
                   " existing one only with --force).")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@click.option("--agent", callback=agent_callback,
              help="Only what this agent may recall: shared memories and its private ones"
                   " (default: every memory of this user).")
@config_option
@click.pass_context
def export_memories(ctx: click.Context, project: str | None, output: Path | None,
                    force: bool, agent: str | None) -> None:
    """Every live memory as JSON lines, sorted by id, with provenance and a schema version."""
    if output is not None and (output.exists() or output.is_symlink()):
        # Replacing is a rename over the path: never over what is not a plain file (a
        # device, a symlink to /etc/passwd), and over a file only when asked to.
        if output.is_symlink() or not output.is_file():
            fail(f"{output} exists and is not a regular file; export writes a new file",
                 EX_CANTCREAT)
        if not force:
            fail(f"{output} exists; add --force to replace it", EX_CANTCREAT)
    settings = settings_for(ctx)

    async def records(backend: MemoryBackend) -> AsyncIterator[dict[str, Any]]:
        async for record in backend.export(project=project_path(project)):
            if agent is None or visible_to(record.get("private_to"), agent):
                yield record

    async def work(backend: MemoryBackend) -> int:
        require(backend, Capability.EXPORT)
        return await write(records(backend))

    async def write(found: AsyncIterator[dict[str, Any]]) -> int:
        count = 0
        if output is None:
            async for record in found:
                sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
            return count
        # `atomic_writer`: an unpredictable name, created exclusively and 0600 whatever the
        # umask; a predictable one could be a planted symlink that the export would follow.
        try:
            with atomic_writer(output) as handle:
                async for record in found:
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                    count += 1
        except OSError as exc:
            fail(f"cannot write {output}: {exc.strerror or exc}", EX_CANTCREAT)
        return count

    async def salvaged(kept: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        wanted = project_path(project)
        for record in kept:
            if (wanted is None or record.get("project") == wanted) and (
                    agent is None or visible_to(record.get("private_to"), agent)):
                yield record

    async def export_all() -> tuple[int, int | None]:
        try:
            return await _with_backend(settings, work), None
        except BackendDamaged:
            if settings.memory.backends != ["sqlite"]:
                raise
        # What still reads of a damaged embedded memory, row by row (docs/operations.md).
        salvage = readable_memories(settings.memory_path)
        return await write(salvaged(salvage.records)), salvage.unreadable

    count, unreadable = run_async(export_all())
    _audit_cli(settings, "export", count)
    click.echo(f"exported {count} memories" + (f" to {output}" if output else "")
               + (f" from a damaged {settings.memory_path} ({unreadable} rows unreadable;"
                  " `memoryd rebuild-memory` mends it)" if unreadable is not None else ""),
               err=True)


#: An export record is one memory on one line; a longer line is not one (and reading it
#: whole would grow without end on `/dev/zero`).
MAX_IMPORT_LINE = 64 << 20


@main.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@config_option
@click.pass_context
def import_memories(ctx: click.Context, path: Path) -> None:
    """Import an export file; memories already present (by id) are left as they are."""
    settings = settings_for(ctx)
    records: list[dict[str, Any]] = []
    if not path.is_file():  # a device or a FIFO would be read for ever
        fail(f"{path} is not a regular file", EX_DATAERR)
    with path.open("rb") as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_IMPORT_LINE + 1), b""), 1):
            if len(raw) > MAX_IMPORT_LINE:
                fail(f"{path}:{number}: a line longer than {MAX_IMPORT_LINE >> 20} MiB is not"
                     " an export record", EX_DATAERR)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                fail(f"{path}:{number}: not UTF-8 (byte {exc.start})", EX_DATAERR)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                fail(f"{path}:{number}: not JSON ({exc.args[0]})", EX_DATAERR)
            try:
                record_to_memory(record)  # every record checked before the store is touched
            except ValueError as exc:
                fail(f"{path}:{number}: {exc}", EX_DATAERR)
            records.append(record)
    async def load(backend: MemoryBackend) -> int:
        require(backend, Capability.EXPORT)
        return await backend.import_records(records)

    added = run_async(_with_backend(settings, load))
    _audit_cli(settings, "import", added)
    click.echo(f"imported {added} new memories, {len(records) - added} already present")


def _print_results(results: list[dict[str, Any]], as_json: bool,
                   query: str | None = None) -> None:
    if as_json:
        print_json(results)
        return
    for line in render.result_lines(results, render.terminal_width(sys.stdout, os.environ),
                                    query):
        click.echo(line)


def _gateway_event(call: dict[str, Any]) -> dict[str, Any]:
    """A recorded gateway call in the audit trail's shape (interface `gateway`)."""
    status = f"HTTP {call['status']}" if call["status"] is not None else "no answer"
    return {"at": utc_text(datetime.fromisoformat(call["at"])), "interface": "gateway",
            "action": f"gateway_{call['operation']}", "outcome": call["outcome"],
            "agent": None, "agent_session_id": call["session"], "memory_ids": [],
            "count": call["count"],
            "detail": call["detail"] or f"{status} in {call['ms']:.0f} ms"}


@main.command("audit")
@click.option("--since", callback=when_option,
              help="Only events since then (e.g. 'yesterday', '2h', an ISO date).")
@click.option("--memory", "memory_id", help="Only events that read or changed this memory.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="The newest N events.")
@json_option
@config_option
@click.pass_context
def audit_command(ctx: click.Context, since: datetime | None, memory_id: str | None,
                  limit: int, as_json: bool) -> None:
    """The audit trail: who read or changed memory, when, through what (never content)."""
    settings = settings_for(ctx)

    async def read() -> list[dict[str, Any]]:
        async with open_store(settings) as conn:
            found = await audit.events(conn, since=since, memory_id=memory_id, limit=limit)
        if memory_id is None:  # gateway calls name no memory of memoryd's
            calls = await gateway_calls(settings.gateway_ledger_path, since=since, limit=limit)
            found = sorted(found + [_gateway_event(c) for c in calls],
                           key=lambda e: e["at"])[-limit:]
        return found

    found = run_async(read())
    if as_json:
        print_json(found)
        return
    if not found:
        click.echo("no audit events" + (" for that memory" if memory_id else ""))
    width = render.terminal_width(sys.stdout, os.environ)
    for event in found:
        who = event["interface"] + (f" {event['agent']}" if event["agent"] else "")
        if event["agent_session_id"]:
            who += f" session {event['agent_session_id']}"
        ids = event["memory_ids"]
        shown = ", ".join(ids[:3]) + (f" (+{len(ids) - 3})" if len(ids) > 3 else "")
        count = "" if event["count"] is None else f" count {event['count']}"
        click.echo(render.fit(f"{render.when(event['at'])}  {event['action']:<18}"
                              f" {event['outcome']:<6} {who}{count}"
                              + (f"  [{shown}]" if shown else "")
                              + (f"  {event['detail']}" if event["detail"] else ""), width))
