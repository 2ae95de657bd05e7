"""The `memoryd` command line: the group lives in `common`, commands in one module per topic.

`main` is loaded on first use (PEP 562), so that `cli.quick` and `cli.render` can be
imported without loading every command and what they import.
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
