"""What every `memoryd` command shares: the group, settings loading, exit statuses, JSON.

Exit statuses mean something, and the systemd/launchd units rely on them:
0 done, 1 failed, 2 bad usage, 65 bad input data (an import file), 66 no such
session or memory, 69 a store or backend is unavailable right now (locked, disk
full), 70 an internal error (a bug: please report it), 73 the state directory
cannot be created or written, 74 a database is damaged (see docs/operations.md,
Recovery), 75 another memoryd holds the state directory, 78 bad configuration.
Every failure prints one line, never a traceback.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import sys
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from memoryd import __version__, names
from memoryd.cli import render
from memoryd.clock import SystemClock, utc_text
from memoryd.config import Settings, load_settings, resolve_config_path
from memoryd.errors import (
    EX_ALREADY_RUNNING,
    EX_CANTCREAT,
    EX_CONFIG,
    EX_DAMAGED,
    AlreadyRunningError,
    ConfigError,
    MemorydError,
    StateDirError,
    WhenError,
)
from memoryd.files import ensure_writable_dir
from memoryd.locations import note_config_checked, read_config_file
from memoryd.logging import configure_logging
from memoryd.timephrases import parse_when

if TYPE_CHECKING:
    from memoryd.memory import RecallResult

_FULL = {errno.ENOSPC, errno.EDQUOT}
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["EX_CANTCREAT", "EX_DAMAGED", "EX_DATAERR", "EX_NOT_FOUND", "EX_SOFTWARE",
           "EX_UNAVAILABLE", "fail", "main", "settings_for"]

EX_DATAERR = 65
EX_NOT_FOUND = 66
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def fail(message: str, code: int) -> None:
    click.echo(f"memoryd: {message}", err=True)
    sys.exit(code)


def settings_for(ctx: click.Context) -> Settings:
    """Load the settings once per command; a bad setting exits 78 with one line."""
    obj: dict[str, Any] = ctx.ensure_object(dict)
    if "settings" not in obj:
        try:
            obj["settings"] = load_settings(obj.get("config"))
        except ConfigError as exc:
            fail(str(exc), EX_CONFIG)
        settings: Settings = obj["settings"]
        command_logging(ctx, settings)
        try:
            # Every command writes there, reading ones too (SQLite's WAL index): say so
            # once, before a store says it in its own words.
            ensure_writable_dir(settings.state_dir)
        except StateDirError as exc:
            fail(str(exc), EX_CANTCREAT)
        _note_checked(obj.get("config"), settings)
    result: Settings = obj["settings"]
    return result


def _note_checked(config: str | None, settings: Settings) -> None:
    """The config file just found valid, noted for the quick path (`cli.quick`)."""
    path, _required = resolve_config_path(config)
    try:
        text = read_config_file(path)
    except (OSError, ValueError):
        return
    note_config_checked(text, settings.state_dir)


#: Commands whose log is their output: the daemon's own.
LOGGING_COMMANDS = frozenset({"run"})


def command_logging(ctx: click.Context, settings: Settings) -> None:
    """A person at a terminal reads answers and sentences, not log records: only the
    daemon logs unless asked (`--verbose` as text, `--log-format`)."""
    obj: dict[str, Any] = ctx.ensure_object(dict)
    asked = obj.get("verbose") or obj.get("log_format")
    level = settings.log_level if ctx.info_name in LOGGING_COMMANDS or asked else "off"
    fmt = {"text": "console", "json": "json"}.get(
        obj.get("log_format") or ("text" if obj.get("verbose") else ""), settings.log_format)
    configure_logging(level, fmt, extra=settings.extra_masks())


def _remember_flag(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value:
        ctx.ensure_object(dict)[param.name or ""] = value


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


def agent_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from memoryd.names import agent_name

    try:
        return agent_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


agent_option = click.option(
    "--agent", callback=agent_callback,
    help="Ask as this agent (claude, codex, gemini, ...): its private memories are included"
         " (without it, only memories shared by every agent).")


def print_json(data: object) -> None:
    click.echo(render.json_text(data))


#: Which module of `memoryd.cli` defines each command: a command loads only its own
#: module (and what that imports); listing them all (`--help`) loads every one.
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(("hook", "hooks", "mcp"), "agent_commands"),
    **dict.fromkeys(("run", "ingest", "status", "sessions", "show", "sync", "doctor",
                     "rebuild-memory"), "daemon_commands"),
    **dict.fromkeys(("recall", "remember", "correct", "forget", "show-memory",
                     "recall-temporal", "context", "briefing", "export", "import", "audit"),
                    "memory_commands"),
    **dict.fromkeys(("retention", "hold", "transcripts", "project"), "governance_commands"),
    "distill": "distill_commands",
    "memory": "layer_commands",
    "service": "service_commands",
    "ui": "ui_commands",
}


class _Group(click.Group):
    """Turns memoryd's own errors into one line on stderr and a meaningful exit status,
    and loads each command's module when the command is first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            import importlib

            importlib.import_module(f"memoryd.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """click's own loop, with its messages one line each: a usage error names the help
        to read, an interrupt says what was kept and exits 130."""
        kwargs["standalone_mode"] = False
        try:
            returned = super().main(*args, **kwargs)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "memoryd"
            fail(f"{' '.join(exc.format_message().split())} (see `{where} --help`)",
                 exc.exit_code)
        except click.ClickException as exc:
            fail(" ".join(exc.format_message().split()), exc.exit_code)
        except click.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt | EOFError):
                fail("interrupted; everything stored before this was kept", 130)
            fail("aborted", 1)
        sys.exit(returned if isinstance(returned, int) and not isinstance(returned, bool)
                 else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            fail(str(exc), EX_CONFIG)
        except AlreadyRunningError as exc:
            fail(str(exc), EX_ALREADY_RUNNING)
        except StateDirError as exc:
            fail(str(exc), EX_CANTCREAT)
        except MemorydError as exc:
            fail(str(exc), EX_DAMAGED if exc.damaged else EX_UNAVAILABLE if exc.transient else 1)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (`memoryd show S | head`): what it wanted it has; end
            # quietly, as a shell tool does, and let nothing write to the closed pipe again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(0)
        except sqlite3.Error as exc:
            # An SQLite error no boundary translated: still one line and a status.
            from memoryd.store.connection import translate

            error = translate(exc)
            fail(f"database: {error}",
                 EX_DAMAGED if error.damaged else EX_UNAVAILABLE if error.transient else 1)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            fail(f"{exc.strerror or exc}{where}", EX_UNAVAILABLE if exc.errno in _FULL else 1)
        except Exception as exc:
            fail(f"internal error: {type(exc).__name__}: {exc} (please report this)",
                 EX_SOFTWARE)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memoryd")
@config_option
@click.option("--verbose", "-v", is_flag=True, expose_value=False, is_eager=True,
              callback=_remember_flag,
              help="Show this command's log records on stderr (as text; see --log-format).")
@click.option("--log-format", "log_format", type=click.Choice(["text", "json"]),
              expose_value=False, is_eager=True, callback=_remember_flag,
              help="Show this command's log records on stderr in this format.")
def main() -> None:
    """memoryd: a memory for AI coding agents that survives crashes, compactions and reboots.

    It follows Claude Code, Codex and Gemini CLI transcripts into a local SQLite
    store, exactly once, whatever happens to the agents or to memoryd itself.
    """




def when_option(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_when(value, SystemClock().now())
    except WhenError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def project_path(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.strip():
        # An empty --project must not quietly become the current directory.
        raise click.BadParameter("an empty project is not a project; leave --project out",
                                 param_hint="--project")
    return names.project_path(value)


def iso_or_none(moment: datetime | None) -> str | None:
    return utc_text(moment, "auto") if moment else None


def result_json(result: RecallResult) -> dict[str, Any]:
    """One recall result as stable JSON: content, score and full provenance."""
    from memoryd.memory.export_format import result_to_record

    return result_to_record(result)
