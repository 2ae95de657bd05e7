"""Commands that connect agents: `hook`, `hooks install|uninstall|status`, `mcp`, `mcp install`."""

from __future__ import annotations

import difflib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from memoryd.cli.common import (
    EX_UNAVAILABLE,
    agent_callback,
    config_option,
    json_option,
    main,
    print_json,
    settings_for,
)
from memoryd.config import Settings
from memoryd.errors import SettingsFileError
from memoryd.hooks.codex import codex_hooks_feature
from memoryd.hooks.install import Change, Installer, Scope, installer_for
from memoryd.names import AGENTS, Agent

F = TypeVar("F", bound=Callable[..., Any])

agent_option = click.option(
    "--agent", "agent", type=click.Choice([*AGENTS, "all"]), default="all", show_default=True,
    help="Which agent's settings to change.")
scope_option = click.option(
    "--scope", type=click.Choice(["user", "project"]), default="user", show_default=True,
    help="user: your settings for every project; project: this directory's settings.")
dry_run_option = click.option("--dry-run", is_flag=True,
                              help="Print what would change; change nothing.")


def change_options(func: F) -> F:
    """--agent, --scope, --dry-run and --config, the options of every install command."""
    return agent_option(scope_option(dry_run_option(config_option(func))))


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": ["-h", "--help"]})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hook(ctx: click.Context, args: tuple[str, ...]) -> None:
    """An agent's hook: `memoryd hook [--agent A] EVENT` reads the agent's JSON on stdin.

    It prints the agent's JSON answer (a <memory_context> block) or nothing, and
    always exits 0. `memoryd hooks install` writes these commands for you.
    """
    from memoryd.hooks.fast import main as hook_main

    config = ctx.ensure_object(dict).get("config")
    given = list(args)
    if config and "--config" not in given:
        given = ["--config", str(config), *given]  # the global option, as the hook's own
    hook_main(given)


def memoryd_executable() -> str:
    """The absolute path of this memoryd (hooks must not depend on the agent's PATH)."""
    candidate = Path(sys.argv[0])
    if candidate.name.startswith("memoryd") and candidate.exists():
        return str(candidate.resolve())
    found = shutil.which("memoryd")
    if found:
        return str(Path(found).resolve())
    return str(Path(sys.executable).with_name("memoryd"))


def _installer(ctx: click.Context, settings: Settings) -> Installer:
    config = ctx.ensure_object(dict).get("config") or os.environ.get("MEMORYD_CONFIG")
    return installer_for(settings, memoryd=memoryd_executable(), home=Path.home(),
                         project=Path(os.getcwd()),
                         config=os.path.abspath(config) if config else None)


def _agents(agent: str) -> list[Agent]:
    return list(AGENTS) if agent == "all" else [agent]  # type: ignore[list-item]


def _show(change: Change, dry_run: bool, verb: str) -> None:
    what = {"feature": "[features] hooks", "allow": "permissions.allow for its read-only"
            " tools"}.get(change.what, change.what)
    if not change.changed:
        click.echo(f"{change.agent}: {what} already {verb} in {change.path}"
                   if verb == "installed" else
                   f"{change.agent}: no memoryd {what} in {change.path}")
    elif dry_run:
        click.echo(f"{change.agent}: would change {change.path}:")
        diff = difflib.unified_diff((change.before or "").splitlines(keepends=True),
                                    (change.after or "").splitlines(keepends=True),
                                    fromfile=str(change.path), tofile=str(change.path))
        click.echo("".join(diff).rstrip("\n"))
    elif change.delete:
        click.echo(f"{change.agent}: {what} {verb}; {change.path} held nothing else"
                   " and is deleted")
    else:
        click.echo(f"{change.agent}: {what} {verb} in {change.path}"
                   + (f" (backup: {change.path.name}.memoryd-backup)"
                      if change.before is not None else ""))
    if change.note and verb == "installed":
        click.echo(f"  note: {change.note}")


def _apply(ctx: click.Context, what: str, agent: str, scope: Scope, install: bool,
           dry_run: bool) -> None:
    settings = settings_for(ctx)
    installer = _installer(ctx, settings)
    failed = False
    for name in _agents(agent):
        try:
            method = installer.hooks if what == "hooks" else installer.mcp
            changes = [method(name, scope, install=install, dry_run=dry_run)]
            if what == "hooks" and name == "codex":
                key = codex_hooks_feature(shutil.which("codex")) if install else None
                changes.append(installer.codex_feature(scope, install=install,
                                                       dry_run=dry_run, key=key))
            if what == "mcp" and name == "claude":
                changes.append(installer.claude_allow(scope, install=install,
                                                      dry_run=dry_run))
        except (SettingsFileError, OSError) as exc:
            click.echo(f"memoryd: {name}: {exc}", err=True)
            failed = True
            continue
        for change in changes:
            if change.what == "feature" and not change.changed and not change.note:
                continue
            _show(change, dry_run, "installed" if install else "removed")
    if failed:
        sys.exit(1)


@main.group()
def hooks() -> None:
    """Connect agents through their hooks: memory at session start and for each prompt."""


@hooks.command("install")
@change_options
@click.pass_context
def hooks_install(ctx: click.Context, agent: str, scope: Scope, dry_run: bool) -> None:
    """Add memoryd's hooks to the agents' settings (other settings stay as they are)."""
    _apply(ctx, "hooks", agent, scope, True, dry_run)


@hooks.command("uninstall")
@change_options
@click.pass_context
def hooks_uninstall(ctx: click.Context, agent: str, scope: Scope, dry_run: bool) -> None:
    """Remove exactly what `hooks install` added."""
    _apply(ctx, "hooks", agent, scope, False, dry_run)


@hooks.command("status")
@agent_option
@scope_option
@json_option
@config_option
@click.pass_context
def hooks_status(ctx: click.Context, agent: str, scope: Scope, as_json: bool) -> None:
    """Which agents have memoryd's hooks and MCP server, and where; exits 69 when what a
    hook runs is missing or does not answer."""
    installer = _installer(ctx, settings_for(ctx))
    reports: list[dict[str, Any]] = [installer.status(a, scope) for a in _agents(agent)]
    if as_json:
        print_json(reports)
    for report in [] if as_json else reports:
        events = ", ".join(report.get("hooks") or []) or "none"
        click.echo(f"{report['agent']} ({scope}): hooks {events} [{report['hooks_file']}];"
                   f" MCP server {'yes' if report['mcp'] else 'no'} [{report['mcp_file']}]")
        if "hooks_error" in report:
            click.echo(f"  {report['hooks_error']}")
        if report.get("untrusted"):
            click.echo(f"  not yet trusted in Codex, so not run: {', '.join(report['untrusted'])}"
                       " (open `/hooks` in Codex to review and trust them)")
        for problem in report.get("broken") or []:
            click.echo(f"  broken: {problem}; run `memoryd hooks install` again")
    if any(report.get("broken") for report in reports):
        raise SystemExit(EX_UNAVAILABLE)


@main.group(invoke_without_command=True)
@click.option("--agent", callback=agent_callback,
              help="The agent this server serves (claude, codex, gemini): its private"
                   " memories are recalled; without it, only shared ones.")
@config_option
@click.pass_context
def mcp(ctx: click.Context, agent: str | None) -> None:
    """The MCP server on stdio (`memoryd mcp`); `memoryd mcp install` registers it."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_for(ctx)
    from memoryd.mcp_server import serve

    serve(settings, agent=agent)


@mcp.command("install")
@change_options
@click.pass_context
def mcp_install(ctx: click.Context, agent: str, scope: Scope, dry_run: bool) -> None:
    """Register memoryd's MCP server with the agents (Claude .mcp.json, Codex, Gemini)."""
    _apply(ctx, "mcp", agent, scope, True, dry_run)


@mcp.command("uninstall")
@change_options
@click.pass_context
def mcp_uninstall(ctx: click.Context, agent: str, scope: Scope, dry_run: bool) -> None:
    """Remove memoryd's MCP server from the agents' settings."""
    _apply(ctx, "mcp", agent, scope, False, dry_run)
