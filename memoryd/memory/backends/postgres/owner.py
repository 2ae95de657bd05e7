"""Whose memories a Postgres backend holds: the owner every row and statement carries,
the agent a row is stamped with, and the origin id that names one memoryd."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from memoryd.memory.models import Memory

PERSON = "person"  # owner_agent of what a person stored by hand


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose memories a backend reads and writes.

    `user` is on every row and in every query. `agents`, when given, narrows reads
    to memories those agents wrote (None: every agent of the user). `origin` names
    this memoryd (one per state directory).
    """

    user: str
    origin: str
    agents: tuple[str, ...] | None = None


def mine(owner: Owner, alias: str = "m") -> tuple[str, dict[str, Any]]:
    """The owner's rows of `alias`: the WHERE clause and its parameters."""
    where = f"{alias}.owner_user = %(user)s"
    params: dict[str, Any] = {"user": owner.user}
    if owner.agents is not None:
        where += f" AND {alias}.owner_agent = ANY(%(agents)s)"
        params["agents"] = list(owner.agents)
    return where, params


def agent_of(memory: Memory) -> str:
    return memory.provenance.source or PERSON


def origin_id(text: str) -> str:
    """A short stable id for a memoryd instance (from its state directory's path and host)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
