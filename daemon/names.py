"""Names memoryd takes from people and agents: an agent's, a project's.

Standard library only: the quick command path (`cli.quick`) checks them too.
"""

from __future__ import annotations

import os


def agent_name(value: str | None) -> str | None:
    """An agent's name as stored in `private_to`, or ValueError for one that cannot be."""
    if value is None:
        return None
    name = value.strip().lower()
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"agent {value!r} is not an agent's name (letters, digits, - _ .)")
    return name


def project_path(value: str) -> str:
    """A project as memoryd names it: the directory's absolute path."""
    return os.path.abspath(os.path.expanduser(value)).rstrip("/") or "/"
