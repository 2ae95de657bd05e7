"""`memoryd service ...`: install and manage memoryd as a systemd or launchd user service."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from memoryd.cli.common import EX_UNAVAILABLE, config_option, fail, main, settings_for
from memoryd.config import resolve_config_path
from memoryd.service_units import Plan, ServiceManager, describe, execute, unreachable


@main.group()
def service() -> None:
    """Install memoryd as a user service (systemd on Linux, launchd on macOS) and manage it."""


def _manager(ctx: click.Context) -> ServiceManager:
    settings = settings_for(ctx)
    platform = {"linux": "linux", "darwin": "macos"}.get(sys.platform)
    if platform is None:
        fail(f"memoryd service supports Linux and macOS, not {sys.platform}", 1)
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
        fail(unreachable(failure.output) or (
            f"`{' '.join(failure.command)}` failed ({failure.returncode}): "
            f"{failure.output or 'no output'}"), EX_UNAVAILABLE)
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
        # Its own output passes through; what it says on failure is read for one case:
        # no service manager to talk to, which deserves a sentence, not D-Bus's words.
        done = subprocess.run(plan.commands[0], stderr=subprocess.PIPE, text=True)
        if done.returncode == 0:
            return
        said = unreachable(done.stderr)
        if said is not None:
            fail(said, EX_UNAVAILABLE)
        sys.stderr.write(done.stderr)
        sys.exit(done.returncode)

    if action == "logs":
        click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")(command)


_simple_action("status", "What the service manager says about memoryd.")
_simple_action("start", "Start the installed service.")
_simple_action("stop", "Stop the service (it finishes the work in hand first).")
_simple_action("restart", "Stop the service and start it again (after an upgrade).")
_simple_action("logs", "The service's recent log lines.")

