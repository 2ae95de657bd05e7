"""Governance commands: `memoryd retention`, `hold`, `transcripts` and `project`.

Both go through the daemon's API when it runs (it is the one writer of its stores)
and open the stores directly otherwise, like every memory command.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from memoryd.cli.common import (
    EX_UNAVAILABLE,
    config_option,
    fail,
    json_option,
    main,
    print_json,
    project_path,
    settings_for,
)
from memoryd.cli.memory_commands import call
from memoryd.config_values import parse_duration
from memoryd.lifecycle.clock_trust import say


@main.command()
@click.option("--dry-run", is_flag=True, help="Only say what would go; delete nothing.")
@click.option("--trust-clock", is_flag=True,
              help="The clock is right, though it reads far later than the time since the"
                   " last run explains: delete by age as it says.")
@json_option
@config_option
@click.pass_context
def retention(ctx: click.Context, dry_run: bool, trust_clock: bool, as_json: bool) -> None:
    """Apply the retention settings now (the daemon also does, daily): expire old
    conversation memories (and summaries, and raw message text, when set), never
    explicit facts, corrections or anything under a legal hold."""
    settings = settings_for(ctx)
    report = call(settings, "retention", {**({"dry_run": True} if dry_run else {}),
                                          **({"trust_clock": True} if trust_clock else {})})
    if as_json:
        print_json(report)
    if report.get("clock_ahead_days") is not None:
        fail(say(timedelta(days=report["clock_ahead_days"])), EX_UNAVAILABLE)
    if as_json:
        return
    policy = settings.retention
    verb = "would expire" if report["dry_run"] else "expired"
    kinds = report["memories"]
    click.echo(f"{verb} {kinds.get('conversation', 0)} conversation memories and"
               f" {kinds.get('session_summary', 0)} session summaries")
    if policy.raw_messages is not None:
        clear = "would clear" if report["dry_run"] else "cleared"
        click.echo(f"{clear} the text of {report['raw_messages']} archived messages in"
                   f" {report['raw_sessions']} sessions")
    if report["held"]:
        click.echo(f"kept {report['held']} past their age: a legal hold covers them")
    if report["dry_run"] and not dry_run:
        click.echo("(retention.dry_run is on in the settings: nothing was deleted)")


@main.group()
def hold() -> None:
    """Legal holds: a project or a session that no deletion may touch (retention,
    forget, transcript clean-up) until the hold is released."""


@hold.command("add")
@click.option("--project", help="Hold every memory and message of this project.")
@click.option("--session", help="Hold this session (id or agent session id).")
@click.option("--reason", help="Why (kept with the hold).")
@json_option
@config_option
@click.pass_context
def hold_add(ctx: click.Context, project: str | None, session: str | None,
             reason: str | None, as_json: bool) -> None:
    """Place a hold on --project or --session."""
    if (project is None) == (session is None):
        raise click.UsageError("give --project or --session")
    done = call(settings_for(ctx), "hold", {"project": project_path(project),
                                             "session": session, "reason": reason})
    if as_json:
        print_json(done)
        return
    state = "placed" if done["created"] else "already stands"
    click.echo(f"hold {done['hold']} on {done['kind']} {done['value']} {state}")


@hold.command("list")
@json_option
@config_option
@click.pass_context
def hold_list(ctx: click.Context, as_json: bool) -> None:
    """Every hold that stands."""
    found = call(settings_for(ctx), "holds", {})["holds"]
    if as_json:
        print_json(found)
        return
    if not found:
        click.echo("no legal holds")
    for item in found:
        click.echo(f"{item['id']:>4}  {item['kind']:<8} {item['value']}  since"
                   f" {item['created_at']}" + (f"  ({item['reason']})" if item["reason"] else ""))


@hold.command("release")
@click.argument("hold_id", type=click.IntRange(1, 2**62))
@config_option
@click.pass_context
def hold_release(ctx: click.Context, hold_id: int) -> None:
    """Release hold HOLD_ID: deletions apply to what it kept again."""
    done = call(settings_for(ctx), "release_hold", {"hold": hold_id})["released"]
    click.echo(f"released hold {hold_id} on {done['kind']} {done['value']}")


@main.group()
def transcripts() -> None:
    """The raw archive's lifecycle: memoryd keeps the agents' transcripts past their own
    clean-up. Choose sessions with --session, --project and/or --older-than; each command
    reports what it did and lists the memories derived from those sessions (never
    deleting them: see `memoryd forget`)."""


def _selection(func: Any) -> Any:
    options: list[Callable[[Any], Any]] = [
            click.option("--session", help="One session (id, agent session id or prefix)."),
            click.option("--project", help="Every session of this project (its directory)."),
            click.option("--older-than", "older_than", callback=_age,
                         help="Sessions quiet for longer than this ('30d', '12h')."),
            json_option, config_option, click.pass_context]
    for option in reversed(options):
        func = option(func)
    return func


def _age(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _run(ctx: click.Context, action: str, session: str | None, project: str | None,
         older_than: float | None, as_json: bool) -> None:
    if session is None and project is None and older_than is None:
        raise click.UsageError("choose sessions: --session, --project and/or --older-than")
    done = call(settings_for(ctx), "transcripts", {
        "action": action, "session": session, "project": project_path(project),
        "older_than": older_than})
    if as_json:
        print_json(done)
        return
    verb = {"archive": "archived", "mask": "masked", "delete_raw": "removed the text of"}
    click.echo(f"{verb[action]} {done['messages']} messages in {done['sessions'] - done['held']}"
               " sessions")
    for path in done["files"]:
        click.echo(f"  {path}")
    if done["held"]:
        click.echo(f"left {done['held']} sessions as they were: a legal hold covers them")
    if done["not_in_memory_yet"]:
        click.echo(f"kept {done['not_in_memory_yet']} messages not yet in memory"
                   " (run `memoryd sync`, then again)")
    derived = done["memory_ids"]
    click.echo(f"{len(derived)} memories were derived from these sessions"
               + (f": {', '.join(derived[:20])}{' …' if len(derived) > 20 else ''}"
                  if derived else "") + " (kept; `memoryd forget` removes them)")


@transcripts.command("archive")
@_selection
def transcripts_archive(ctx: click.Context, session: str | None, project: str | None,
                        older_than: float | None, as_json: bool) -> None:
    """Copy the sessions' raw lines to <state_dir>/archive/<agent>/<session>.jsonl.gz
    (0600): they outlive the agent's own clean-up and this database."""
    _run(ctx, "archive", session, project, older_than, as_json)


@transcripts.command("mask")
@_selection
def transcripts_mask(ctx: click.Context, session: str | None, project: str | None,
                     older_than: float | None, as_json: bool) -> None:
    """Mask secrets, personal data and privacy.extra_patterns in the sessions' stored
    messages and raw lines (in place; the raw lines stay valid JSON)."""
    _run(ctx, "mask", session, project, older_than, as_json)


@transcripts.command("delete-raw")
@_selection
def transcripts_delete_raw(ctx: click.Context, session: str | None, project: str | None,
                           older_than: float | None, as_json: bool) -> None:
    """Remove the stored text and raw lines of the sessions' messages that memory holds;
    messages not yet in memory are kept (nothing is lost)."""
    _run(ctx, "delete_raw", session, project, older_than, as_json)


@main.group()
def project() -> None:
    """Projects are full paths: two folders named `api` are two projects. Link a renamed
    or moved folder to its new path so its memories and sessions follow it."""


@project.command("link")
@click.argument("old")
@click.argument("new")
@json_option
@config_option
@click.pass_context
def project_link(ctx: click.Context, old: str, new: str, as_json: bool) -> None:
    """OLD (the folder's former path) is now NEW: its sessions and memories move to NEW,
    and whatever OLD's transcripts bring later is saved under NEW."""
    if not old.strip() or not new.strip():
        raise click.UsageError("give the old path and the new path")
    done = call(settings_for(ctx), "link_project",
                {"old": project_path(old), "new": project_path(new)})
    if as_json:
        print_json(done)
        return
    click.echo(f"linked {done['old']} -> {done['new']}: {done['memories_moved']} memories and"
               f" {done['sessions_moved']} sessions moved")
    if done.get("unmoved_in"):
        click.echo(f"note: {', '.join(done['unmoved_in'])} cannot move memories; there they"
                   " stay under the old path", err=True)


@project.command("links")
@json_option
@config_option
@click.pass_context
def project_links(ctx: click.Context, as_json: bool) -> None:
    """Every link from an old path to a new one."""
    found = call(settings_for(ctx), "project_links", {})["links"]
    if as_json:
        print_json(found)
        return
    if not found:
        click.echo("no project links")
    for item in found:
        click.echo(f"{item['old_path']} -> {item['new_path']}  (since {item['linked_at']})")


@project.command("unlink")
@click.argument("old")
@config_option
@click.pass_context
def project_unlink(ctx: click.Context, old: str) -> None:
    """Stop saving OLD's later sessions under the path it was linked to (what moved stays)."""
    done = call(settings_for(ctx), "unlink_project", {"old": project_path(old)})
    click.echo(f"unlinked {done['unlinked']}")
