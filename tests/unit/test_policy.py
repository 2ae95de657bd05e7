"""memory.policy: the forgetting rules every backend shares."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryd.memory.models import Memory, MemoryType, Provenance
from memoryd.memory.policy import ForgetScope, is_forgotten

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _memory(project: str | None = "/p", external: str | None = "s-1", session: int = 7,
            started: datetime = T0) -> Memory:
    return Memory(id="m", content="x", type=MemoryType.CONVERSATION, importance=0.5,
                  project=project, tags=(), created_at=started + timedelta(hours=1),
                  updated_at=started + timedelta(hours=1),
                  provenance=Provenance(session_id=session, session_external_id=external,
                                        started_at=started))


@pytest.mark.parametrize("scope", [ForgetScope(), ForgetScope(all=True, project="/p"),
                                   ForgetScope(all=True, memory_ids=[])])
def test_a_forget_names_exactly_everything_or_some_filters(scope: ForgetScope) -> None:
    """Neither nothing nor everything-with-a-filter is a forget."""
    with pytest.raises(ValueError):
        scope.check()


def test_what_a_forget_remembers() -> None:
    """A session's forget keeps its ids (and the agent's ids of what it took); a project's
    keeps the project; an exact-ids forget keeps nothing."""
    assert ForgetScope(session_id=7).lasting(["a", None, "b"]) == {
        ("session_id", "7"), ("session", "a"), ("session", "b")}
    assert ForgetScope(session_id=7).lasting([], session_id_value="host:7") == {
        ("session_id", "host:7")}
    assert ForgetScope(project="/p").lasting(["a"]) == {("project", "/p")}
    assert ForgetScope(memory_ids=["m"]).lasting(["a"]) == set()


def test_a_forgotten_project_keeps_what_began_after_it() -> None:
    """A project's conversations that began before its forget stay out; later ones come in;
    a session's stay out whenever they began."""
    scopes = {("project", "/p"): T0 + timedelta(days=1), ("session", "s-9"): T0}
    assert is_forgotten(_memory(started=T0), scopes)
    assert not is_forgotten(_memory(started=T0 + timedelta(days=2)), scopes)
    assert is_forgotten(_memory(project="/q", external="s-9", started=T0 + timedelta(days=5)),
                        scopes)
    assert not is_forgotten(_memory(project=None), scopes)
    assert is_forgotten(_memory(project=None), {("session_id", "7"): T0})
