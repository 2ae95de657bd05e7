"""The chain's outbox drained: the primary's waiting entries replayed oldest first, a
failure parking its entry or pausing the rest, and parked entries a person resolved."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import structlog

from memoryd.errors import BackendError, BackendOutcomeUnknown, BackendUnavailable
from memoryd.memory.export_format import from_utc_text
from memoryd.memory.layers import Layer
from memoryd.memory.models import (
    ConversationSegment,
    DistilledMemory,
    RequestedMemory,
    SessionSummary,
)
from memoryd.memory.outbox import Depth, Entry, Outbox, decode
from memoryd.memory.protocol import MemoryBackend

log = structlog.get_logger("memoryd.memory.chain")



@runtime_checkable
class UnknownOutcomes(Protocol):
    """A layer that keeps writes whose outcome is unknown for a person (the gateway)."""

    async def unknown(self) -> list[tuple[str, str]]: ...

    async def resolve_unknown(self, *, applied: bool) -> int: ...


async def drain(primary: Layer, outbox: Outbox, limit: int) -> int:
    """Replay up to `limit` waiting entries to the primary, oldest first; how many landed."""
    entries = await outbox.waiting(primary.name, limit)
    if not entries:
        return 0
    try:
        backend = await primary.get()
    except BackendUnavailable:
        return 0
    if not await backend.is_available():
        return 0
    landed = 0
    for entry in entries:
        try:
            await replay(backend, entry)
        except BackendOutcomeUnknown as exc:
            await outbox.failed(entry.seq, str(exc), park=True)
            log.error("outbox_entry_outcome_unknown", layer=primary.name,
                      op=entry.op, key=entry.key, error=str(exc))
            continue
        except BackendUnavailable as exc:
            log.info("outbox_drain_paused", layer=primary.name, error=exc.detail)
            break
        except (BackendError, ValueError, TypeError, KeyError) as exc:
            # Refused for a reason of its own (or unreadable): retried at the next
            # drains, and parked after MAX_ATTEMPTS. The entries behind it wait, so
            # the primary never receives a session's saves out of order.
            parked = await outbox.failed(entry.seq, f"{type(exc).__name__}: {exc}")
            log.error("outbox_entry_failed", layer=primary.name, op=entry.op,
                      key=entry.key, parked=parked, error=str(exc))
            if parked:
                continue
            break
        await outbox.done(entry.seq)
        landed += 1
    if landed:
        log.info("outbox_drained", layer=primary.name, count=landed)
    return landed


async def replay(backend: MemoryBackend, entry: Entry) -> None:
    payload = entry.payload
    if entry.op == "segment":
        value = decode("segment", payload)
        assert isinstance(value, ConversationSegment)
        await backend.save_conversation_segment(value)
    elif entry.op == "summary":
        summary = decode("summary", payload)
        assert isinstance(summary, SessionSummary)
        await backend.save_session_summary(summary)
    elif entry.op == "requested":
        requested = decode("requested", payload)
        assert isinstance(requested, RequestedMemory)
        await backend.save_requested_memory(requested)
    elif entry.op == "distilled":
        distilled = decode("distilled", payload)
        assert isinstance(distilled, DistilledMemory)
        await backend.save_distilled_memory(distilled)
    elif entry.op == "record":
        await backend.import_records([payload])
    elif entry.op == "forget":
        await backend.forget(payload["memory_id"], hard=bool(payload["hard"]))
    elif entry.op == "forget_where":
        args = dict(payload)
        as_of = args.pop("as_of", None)
        await backend.forget_where(**args,
                                   as_of=from_utc_text(as_of) if as_of else None)
    else:
        raise ValueError(f"unknown outbox operation {entry.op!r}")


async def resolve_parked(layers: Sequence[Layer], outbox: Outbox, *, applied: bool) -> int:
    """A person decided about the parked entries whose answers were lost: `applied`
    (they arrived: drop them) or not (send them again at the next drain). Entries
    parked behind them (later saves of the same session, never sent) go again
    either way. Returns how many entries were resolved."""
    lost: set[str] = set()
    for layer in layers:
        try:
            backend = await layer.get()
        except BackendError:
            continue
        if isinstance(backend, UnknownOutcomes):
            lost |= {segment for _, segment in await backend.unknown()}
            await backend.resolve_unknown(applied=applied)
    primary = layers[0].name
    dropped = await outbox.drop_parked(primary, lost) if applied else 0
    return dropped + await outbox.unpark(primary)


def describe_depth(depths: Sequence[Depth], now: datetime) -> list[dict[str, Any]]:
    """The outbox's depth per layer for status and doctor."""
    return [{"layer": d.layer, "waiting": d.waiting, "parked": d.parked,
             "oldest": d.oldest.isoformat() if d.oldest else None,
             "oldest_age_seconds": (round((now - d.oldest).total_seconds())
                                    if d.oldest else None)} for d in depths]
