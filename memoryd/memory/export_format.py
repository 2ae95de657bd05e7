"""The portable export format: one JSON object per memory, shared by every backend.

A record holds every field of a `Memory`, with datetimes as ISO-8601 UTC text
and provenance nested, plus `schema_version`. Readers refuse versions they do
not know. Key order is fixed so that exported files diff cleanly.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memoryd.clock import utc_text
from memoryd.memory.models import Memory, MemoryType, Provenance, RecallResult
from memoryd.names import agent_name

SCHEMA_VERSION = 1


def to_utc_text(value: datetime) -> str:
    """A fixed-width ISO-8601 UTC string, so that text order is time order."""
    return utc_text(value, "microseconds", zulu=False)


def opt_utc_text(value: datetime | None) -> str | None:
    return None if value is None else to_utc_text(value)


def from_utc_text(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}")
    return parsed.astimezone(UTC)


def opt_from_utc_text(value: str | None) -> datetime | None:
    return None if value is None else from_utc_text(value)


def provenance_to_record(p: Provenance) -> dict[str, Any]:
    """Where a memory came from, as JSON (exports, recall results)."""
    return {
        "session_id": p.session_id,
        "session_external_id": p.session_external_id,
        "source": p.source,
        "project": p.project,
        "first_index": p.first_index,
        "last_index": p.last_index,
        "message_uuids": list(p.message_uuids),
        "started_at": opt_utc_text(p.started_at),
        "ended_at": opt_utc_text(p.ended_at),
    }


def memory_to_record(memory: Memory) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "id": memory.id,
        "type": memory.type.value,
        "content": memory.content,
        "importance": memory.importance,
        "project": memory.project,
        "tags": list(memory.tags),
        "provenance": provenance_to_record(memory.provenance),
        "created_at": to_utc_text(memory.created_at),
        "updated_at": to_utc_text(memory.updated_at),
        "supersedes": memory.supersedes,
        "superseded_by": memory.superseded_by,
        "reason": memory.reason,
        "deleted_at": opt_utc_text(memory.deleted_at),
        "access_count": memory.access_count,
        "last_accessed_at": opt_utc_text(memory.last_accessed_at),
        **({"private_to": memory.private_to} if memory.private_to else {}),
    }


def _opt(kind: type, value: Any, name: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise ValueError(f"field {name!r} must be {kind.__name__} or null")
    return value


def record_to_memory(record: Mapping[str, Any]) -> Memory:
    """Parse one export record; raises ValueError with a readable reason."""
    if not isinstance(record, Mapping):
        raise ValueError("a record must be a JSON object")
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"unknown export schema_version {version!r}; this memoryd reads version "
            f"{SCHEMA_VERSION} (upgrade memoryd, or export again with this version)"
        )
    try:
        prov = record.get("provenance") or {}
        if not isinstance(prov, Mapping):
            raise ValueError("field 'provenance' must be an object")
        importance = _number(record["importance"], "importance")
        if not 0.0 <= importance <= 1.0:
            raise ValueError(f"importance {importance} is outside 0..1")
        memory_id = record["id"]
        content = record["content"]
        if not isinstance(memory_id, str) or not memory_id:
            raise ValueError("field 'id' must be a non-empty string")
        if not isinstance(content, str):
            raise ValueError("field 'content' must be a string")
        return Memory(
            id=memory_id,
            content=content,
            type=MemoryType(record["type"]),
            importance=importance,
            project=_opt(str, record.get("project"), "project"),
            tags=_strings(record.get("tags"), "tags"),
            provenance=Provenance(
                session_id=_opt(int, prov.get("session_id"), "provenance.session_id"),
                session_external_id=_opt(
                    str, prov.get("session_external_id"), "provenance.session_external_id"
                ),
                source=_opt(str, prov.get("source"), "provenance.source"),
                project=_opt(str, prov.get("project"), "provenance.project"),
                first_index=_opt(int, prov.get("first_index"), "provenance.first_index"),
                last_index=_opt(int, prov.get("last_index"), "provenance.last_index"),
                message_uuids=_strings(prov.get("message_uuids"), "provenance.message_uuids"),
                started_at=opt_from_utc_text(prov.get("started_at")),
                ended_at=opt_from_utc_text(prov.get("ended_at")),
            ),
            created_at=from_utc_text(record["created_at"]),
            updated_at=from_utc_text(record["updated_at"]),
            supersedes=_opt(str, record.get("supersedes"), "supersedes"),
            superseded_by=_opt(str, record.get("superseded_by"), "superseded_by"),
            reason=_opt(str, record.get("reason"), "reason"),
            deleted_at=opt_from_utc_text(record.get("deleted_at")),
            access_count=int(_number(record.get("access_count") or 0, "access_count")),
            last_accessed_at=opt_from_utc_text(record.get("last_accessed_at")),
            private_to=agent_name(_opt(str, record.get("private_to"), "private_to")),
        )
    except KeyError as exc:
        raise ValueError(f"missing field {exc.args[0]!r}") from exc
    except (TypeError, AttributeError, OverflowError) as exc:
        raise ValueError(str(exc)) from exc


def _number(value: Any, name: str) -> float:
    # bool is an int to Python; `true` where a number belongs is a broken record.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"field {name!r} must be a number")
    return float(value)


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field {name!r} must be a list of strings")
    return tuple(value)


def result_to_record(result: RecallResult) -> dict[str, Any]:
    """One recall result as stable JSON: content, score and full provenance."""
    return {
        "memory_id": result.memory_id,
        "type": result.type.value,
        "content": result.content,
        "excerpt": result.excerpt,
        "score": round(result.score, 6),
        "relevance": round(result.relevance, 6),
        "importance": result.importance,
        "project": result.project,
        "tags": list(result.tags),
        "created_at": to_utc_text(result.created_at),
        "provenance": provenance_to_record(result.provenance),
        **({"layer": result.layer} if result.layer else {}),
        **({"private_to": result.private_to} if result.private_to else {}),
        **({"session_matches": result.session_matches} if result.session_matches > 1 else {}),
        **({"similarity": round(result.similarity, 6)} if result.similarity is not None
           else {}),
    }
