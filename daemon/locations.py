"""Where memoryd looks by default: its state directory and its config file.

Standard library only: the hook and the quick command path use it too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def expanded(value: str) -> Path:
    """A path from a setting: `$VARS` and `~` expanded."""
    return Path(os.path.expandvars(value)).expanduser()


def default_state_dir() -> Path:
    if sys.platform == "darwin":
        return Path("~/Library/Application Support/memoryd").expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path("~/.local/share").expanduser()) / "memoryd"


def default_config_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path("~/.config").expanduser()
    return base / "memoryd" / "config.yaml"
