"""The `memoryd` command line: the group lives in `common`, commands in one module per topic."""

from daemon.cli import (
    agent_commands,
    daemon_commands,
    governance_commands,
    layer_commands,
    memory_commands,
    service_commands,
    ui_commands,
)
from daemon.cli.common import main

__all__ = ["agent_commands", "daemon_commands", "governance_commands", "layer_commands", "main",
           "memory_commands", "service_commands", "ui_commands"]
