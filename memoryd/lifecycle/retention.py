"""Retention: what memoryd derived is kept as long as the settings say, and no longer.

Once a day (`retention.schedule`) and on request (`memoryd retention`):

- conversation memories older than `retention.conversations` (default never: a
  person sets it) and session summaries older than `retention.summaries` (default
  never) are
  deleted for good, with a deletion record each (never their text). Age is
  counted from when the conversation happened, not from when memoryd saved it.
  Explicit facts and corrections never expire, and neither does a memory that is
  part of a correction chain: a person's correction is kept whole.
- session digests are kept: when a session's conversation memories expire, its digest
  is what memory still knows of it (what it asked, changed, ran, concluded, left open).
- the raw archive's message text older than `retention.raw_messages` (default
  never) is cleared once memory holds those messages (`store.raw`).
- automatic memories (conversation segments, summaries) that say the same thing
  in the same project (the same text once case, spacing and punctuation are set
  aside: a resumed session replays its history into a new transcript) are merged
  into the oldest one. The others are deleted with a deletion record each, which
  keeps where they came from (session, project, type, when), and the audit record
  names the survivor and what was merged into it.
- nothing under a legal hold (`memoryd hold`) is touched, whatever its age.

With `dry_run` (or `retention.dry_run`) it reports what would go and deletes
nothing. Every run is one audit record (counts and memory ids, never content); a dry
run is recorded as `retention_dry_run`, with its counts and no ids.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.config import RetentionSettings
from memoryd.lifecycle.clock_trust import clock_ahead, say
from memoryd.memory import Capability, MemoryBackend, MemoryType
from memoryd.memory.export_format import from_utc_text
from memoryd.store import audit
from memoryd.store.holds import Holds, standing
from memoryd.store.raw import expire_raw

log = structlog.get_logger("memoryd.lifecycle")

#: Memories deleted per call: one transaction, one index clean-up each.
BATCH = 2000
#: Memories memoryd made by itself: merged when they repeat each other.
AUTOMATIC = (MemoryType.CONVERSATION.value, MemoryType.SESSION_SUMMARY.value)
_NOT_WORDS = re.compile(r"[\W_]+")


@dataclass(slots=True)
class RetentionReport:
    dry_run: bool
    #: Memory type -> ids expired (or that would be).
    memories: dict[str, list[str]] = field(default_factory=dict)
    #: Memories past their age kept because a legal hold covers them.
    held: int = 0
    raw_messages: int = 0
    raw_sessions: int = 0
    #: Survivor id -> the ids of the duplicates merged into it.
    merged: dict[str, list[str]] = field(default_factory=dict)
    #: How many days the wall clock seems ahead of what the time since the last run
    #: explains (`clock_trust`): nothing was deleted by age. None: the clock is trusted.
    clock_ahead_days: float | None = None

    @property
    def expired(self) -> int:
        return sum(len(ids) for ids in self.memories.values())

    def touched(self) -> list[str]:
        """Every id the run deleted (or would), and the survivors of merges."""
        return [*(i for ids in self.memories.values() for i in ids),
                *(i for ids in self.merged.values() for i in ids), *self.merged]

    def as_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "expired": self.expired,
                "memories": {kind: len(ids) for kind, ids in self.memories.items()},
                "memory_ids": self.touched(),
                "held": self.held, "raw_messages": self.raw_messages,
                "raw_sessions": self.raw_sessions,
                "merged": sum(len(ids) for ids in self.merged.values()),
                "merged_into": self.merged, "clock_ahead_days": self.clock_ahead_days}


def _cutoffs(policy: RetentionSettings, now: datetime) -> dict[str, datetime]:
    limits = {MemoryType.CONVERSATION.value: policy.conversations,
              MemoryType.SESSION_SUMMARY.value: policy.summaries}
    return {kind: now - timedelta(seconds=age) for kind, age in limits.items()
            if age is not None}


def _happened(record: dict[str, Any]) -> datetime:
    """When the conversation a memory holds took place (its end), else when it was made."""
    prov = record.get("provenance") or {}
    when = prov.get("ended_at") or prov.get("started_at") or record["created_at"]
    return from_utc_text(when)


def _gist(text: str) -> str:
    """What a text says once case, spacing and punctuation are set aside."""
    return hashlib.sha256(_NOT_WORDS.sub(" ", text.casefold()).strip().encode()).hexdigest()


async def survey(backend: MemoryBackend, policy: RetentionSettings, holds: Holds,
                 now: datetime) -> tuple[dict[str, list[str]], int, dict[str, list[str]]]:
    """One pass over the store: (type -> ids past their age, how many of those a hold
    keeps, survivor id -> later automatic memories of the same project saying the same
    thing). Chains holding a correction and anything a hold covers are left alone."""
    cutoffs = _cutoffs(policy, now)
    expired: dict[str, list[str]] = {}
    held = 0
    groups: dict[tuple[str, str | None, str | None, str], list[tuple[datetime, str]]] = {}
    if Capability.EXPORT not in backend.capabilities:
        return expired, held, {}
    async for record in backend.export():
        kind = record["type"]
        if (kind not in AUTOMATIC and kind not in cutoffs) or record.get("supersedes") \
                or record.get("superseded_by"):
            continue
        prov = record.get("provenance") or {}
        covered = holds.covers(project=record.get("project"),
                               session_id=prov.get("session_id"),
                               session_external_id=prov.get("session_external_id"))
        cutoff = cutoffs.get(kind)
        if cutoff is not None and _happened(record) < cutoff:
            if covered:
                held += 1
            else:
                expired.setdefault(kind, []).append(record["id"])
            continue
        if kind in AUTOMATIC and not covered:
            # Never across agents: a merge must not change who may recall what is kept.
            key = (kind, record.get("project"), record.get("private_to"),
                   _gist(record["content"]))
            groups.setdefault(key, []).append(
                (from_utc_text(record["created_at"]), record["id"]))
    merged = {}
    for members in groups.values():
        if len(members) > 1:
            members.sort()
            merged[members[0][1]] = [memory_id for _when, memory_id in members[1:]]
    return expired, held, merged


async def _delete(backend: MemoryBackend, ids: Sequence[str]) -> int:
    deleted = 0
    for start in range(0, len(ids), BATCH):
        deleted += await backend.forget_where(memory_ids=ids[start:start + BATCH], hard=True)
    return deleted


class Retention:
    """The retention job over the daemon's store and the memory backend."""

    def __init__(self, conn: aiosqlite.Connection, backend: MemoryBackend, clock: Clock,
                 policy: RetentionSettings) -> None:
        self._conn = conn
        self._backend = backend
        self._clock = clock
        self.policy = policy

    async def run(self, *, dry_run: bool | None = None, audit_as: str | None = "daemon",
                  trust_clock: bool = False) -> RetentionReport:
        """Apply the policy now; recorded in the audit trail as `audit_as` (None: the
        caller records it). Nothing is deleted while the wall clock seems to have jumped
        ahead (`clock_trust`), unless `trust_clock`: the person said it is right."""
        dry = self.policy.dry_run if dry_run is None else dry_run
        now = self._clock.now()
        by_age = any(value is not None for value in (
            self.policy.conversations, self.policy.summaries, self.policy.raw_messages))
        gap = await clock_ahead(self._conn, self._clock, trust=trust_clock,
                                mark=not dry) if by_age else None
        if gap is not None:
            report = RetentionReport(dry_run=dry, clock_ahead_days=gap.total_seconds() / 86400)
            if dry:
                return report
            log.warning("retention_clock_ahead", days=round(report.clock_ahead_days or 0, 1))
            if audit_as is not None:
                await audit.record(self._conn, audit.AuditEvent(
                    interface=audit_as, action="retention_refused", detail=say(gap)), now)
            return report
        holds = await standing(self._conn)
        report = RetentionReport(dry_run=dry)
        report.memories, report.held, report.merged = await survey(
            self._backend, self.policy, holds, now)
        if not dry:
            for ids in (*report.memories.values(), *report.merged.values()):
                await _delete(self._backend, ids)
        if self.policy.raw_messages is not None:
            before = now - timedelta(seconds=self.policy.raw_messages)
            report.raw_messages, report.raw_sessions = await expire_raw(
                self._conn, before, holds, dry_run=dry)
        merged = sum(len(ids) for ids in report.merged.values())
        log.info("retention_done", dry_run=dry, expired=report.expired,
                 by_type={k: len(v) for k, v in report.memories.items()}, held=report.held,
                 merged=merged, raw_messages=report.raw_messages,
                 raw_sessions=report.raw_sessions)
        if audit_as is None:
            return report
        await audit.record(self._conn, audit.AuditEvent(
            interface=audit_as, action="retention_dry_run" if dry else "retention",
            memory_ids=() if dry else tuple(report.touched()),
            count=report.expired + merged,
            detail=(f"expired {report.expired}, merged {merged} into {len(report.merged)};"
                    f" held {report.held}; raw messages {report.raw_messages}"
                    f" in {report.raw_sessions} sessions")), now)
        return report


def describe(report: RetentionReport) -> str:
    """What a (dry) run removes, in one line."""
    if report.clock_ahead_days is not None:
        return "nothing: " + say(timedelta(days=report.clock_ahead_days))
    merged = sum(len(ids) for ids in report.merged.values())
    if not report.expired and not merged and not report.raw_messages:
        return "nothing"
    parts = [f"{len(ids)} {kind.replace('_', ' ')} memories past their age"
             for kind, ids in sorted(report.memories.items()) if ids]
    if merged:
        parts.append(f"{merged} repeated automatic memories (merged into the oldest)")
    if report.raw_messages:
        parts.append(f"the text of {report.raw_messages} archived messages")
    return ", ".join(parts)
