"""The `memoryd` executable: `memoryd hook` starts without loading the rest of memoryd.

A hook runs on every prompt an agent sends, so it must not pay for importing
the command line, the stores and their libraries. `status`, `sessions`, `recall`,
`context` and `remember` ask a running daemon the same way (`cli.quick`), and `mcp`
answers its handshake before loading more; every other command, and these when the
quick path cannot answer, loads the full command line.
"""

from __future__ import annotations

import sys

#: How long (seconds) a thread may hold Python's lock while another waits for it. The
#: stores' SQLite threads take it back after every statement, while the event loop's
#: thread parses, cuts and masks; at CPython's default (5 ms) each statement then waits
#: for the loop's whole turn, and a sync spent a quarter of its time waiting so.
SWITCH_INTERVAL = 0.0005


def _hook_args(args: list[str]) -> list[str] | None:
    """The hook's own arguments when `args` run `memoryd hook` (the global `--config`
    before it passed on to it), else None."""
    if {"-h", "--help"} & set(args):
        return None
    if args[:1] == ["hook"]:
        return args[1:]
    if args[:1] == ["--config"] and args[2:3] == ["hook"]:
        return ["--config", args[1], *args[3:]]
    if args[:1] and args[0].startswith("--config=") and args[1:2] == ["hook"]:
        return ["--config", args[0].removeprefix("--config="), *args[2:]]
    return None


def main() -> None:
    args = sys.argv[1:]
    hook_args = _hook_args(args)
    if hook_args is not None:
        from memoryd.hooks.fast import main as hook_main

        hook_main(hook_args)
    if {"status", "sessions", "recall", "context", "remember", "mcp"} & set(args[:3]):
        # With the daemon running, these ask it without loading the full command line.
        from memoryd.cli.quick import run

        status = run(args)
        if status is not None:
            sys.stdout.flush()
            sys.exit(status)
    from memoryd.cli import main as cli_main

    sys.setswitchinterval(SWITCH_INTERVAL)
    cli_main()
