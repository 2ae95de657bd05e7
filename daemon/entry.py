"""The `memoryd` executable: `memoryd hook` starts without loading the rest of memoryd.

A hook runs on every prompt an agent sends, so it must not pay for importing
the command line, the stores and their libraries; every other command does.
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["hook"] and not {"-h", "--help"} & set(args):
        from daemon.hooks.fast import main as hook_main

        hook_main(args[1:])
    from daemon.cli import main as cli_main

    cli_main()
