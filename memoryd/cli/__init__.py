"""The `memoryd` command line: the group lives in `common`, commands in one module per topic.

`main` is loaded on first use (PEP 562), so that `cli.quick` and `cli.render` can be
imported without loading every command and what they import.

    common.py               the group, settings loading, exit statuses, JSON; loads a
                            command's module when the command is first asked for
    quick.py                the quick path: status, sessions, recall, context and
                            remember asked of a running daemon with the standard library
                            only; mcp started before the full command line loads
    render.py               what status, sessions and recall print (standard library only)
    daemon_commands.py      run, ingest, status, sessions, show, sync, rebuild-memory,
                            doctor
    memory_commands.py      recall, recall-temporal, remember, correct, forget,
                            show-memory, context, briefing, export, import, audit
    agent_commands.py       hook, hooks install|uninstall|status, mcp, mcp install|uninstall
    governance_commands.py  retention, hold, transcripts, project
    layer_commands.py       memory outbox, memory copy: the chain's layers
    distill_commands.py     distill: older sessions sent to the model, when asked
    service_commands.py     service install|uninstall|start|stop|restart|status|logs
    ui_commands.py          ui: the web viewer, from the daemon or served by the command
"""

from __future__ import annotations

from typing import Any

_COMMAND_MODULES = ("agent_commands", "daemon_commands", "distill_commands",
                    "governance_commands", "layer_commands", "memory_commands",
                    "service_commands", "ui_commands")

__all__ = ["main", *_COMMAND_MODULES]


def __getattr__(name: str) -> Any:
    if name != "main" and name not in _COMMAND_MODULES:
        raise AttributeError(f"module 'memoryd.cli' has no attribute {name!r}")
    import importlib

    from memoryd.cli.common import main

    # Commands register on `main` as their module loads; `main` loads each on first use.
    return main if name == "main" else importlib.import_module(f"memoryd.cli.{name}")
