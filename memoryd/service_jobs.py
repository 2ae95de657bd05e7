"""The daemon's periodic jobs: expiry, recovery, embedding, the outbox, distillation,
integrity, the audit trail and retention, each a method, and their schedule."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.config import Settings
from memoryd.distill.worker import Distiller
from memoryd.errors import EmbeddingError, StoreDamaged
from memoryd.ingest.ingester import Ingester
from memoryd.lifecycle.clock_trust import clock_ahead
from memoryd.lifecycle.expiry import expire_stale_sessions
from memoryd.lifecycle.recovery import Recovery
from memoryd.lifecycle.repositories import relabel_by_repository
from memoryd.lifecycle.rerender import rerender_step
from memoryd.lifecycle.retention import Retention
from memoryd.lifecycle.scheduling import PeriodicJob
from memoryd.lifecycle.throughput import Throughput
from memoryd.memory import MemoryBackend
from memoryd.memory.chain import DRAIN_BATCH, ChainBackend
from memoryd.memory.embeddings import LazyLocalEmbedder
from memoryd.memory.protocol import release_memory, vector_queue
from memoryd.process import return_freed_memory
from memoryd.sqlite import shrink_memory
from memoryd.store import audit
from memoryd.store.connection import integrity_problems
from memoryd.store.distill_queue import distill_counts

log = structlog.get_logger("memoryd.service")


#: The embedding job: every EMBED_INTERVAL s, batches of EMBED_BATCH chunks (sorted by
#: length within a batch, so the more the less padding; ~1.5 s of the local model on 2
#: cores, which bounds how long a stop waits), until the backlog is done or, for an
#: embedder that does not yield its cores, for at most EMBED_SLICE s.
EMBED_INTERVAL, EMBED_BATCH, EMBED_SLICE = 5.0, 32, 2.0
#: The chain's outbox is replayed to its primary this often (when it has entries).
OUTBOX_INTERVAL = 5.0
#: Audit events past `audit_retention` are deleted at start-up, then daily.
AUDIT_EXPIRY_INTERVAL = 24 * 3600.0
#: SQLite's quick_check of both databases: at start-up, then daily.
INTEGRITY_INTERVAL = 24 * 3600.0
#: An idle daemon drops the local model after this long without an embedding or query.
MODEL_IDLE_RELEASE = 300.0
#: Once recovery goes quiet after saving at least this many segments (a backfill), and
#: once after start-up (which reads every file's state and every file), the daemon hands
#: back SQLite's page caches and the heap it freed: an idle daemon is not the size of its
#: busiest hour. "Quiet": a pass saved nothing and no file stored a line for RELEASE_QUIET s.
TRIM_AFTER_SEGMENTS = 1000
RELEASE_QUIET = 5.0
#: The distillation queue is looked at this often (when a model is configured); how many
#: segments a pass sends is bounded by `memory.llm.per_minute`.
DISTILL_INTERVAL = 5.0


@dataclass(slots=True)
class ReleaseDue:
    """When a quiet recovery pass hands memory back (see TRIM_AFTER_SEGMENTS)."""

    saved: int = 0  # segments recovery saved since memory was last handed back
    after: int = 0  # ... that make the next quiet pass hand it back (0: start-up's)

    def due(self, saved_now: int, *, quiet: bool) -> bool:
        """Count a pass's saved segments; whether memory is to be handed back now."""
        self.saved += saved_now
        if saved_now or not quiet or self.saved < self.after:
            return False
        self.saved, self.after = 0, TRIM_AFTER_SEGMENTS
        return True


class DaemonJobs:
    """The daemon's periodic jobs over the jobs' own store connection. What they need of
    the daemon (`Service`) is handed in; what only they use is theirs."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        settings: Callable[[], Settings],
        clock: Clock,
        *,
        stop_event: asyncio.Event,
        sync_lock: asyncio.Lock,
        store_conns: list[aiosqlite.Connection],
        status: dict[str, Any],
        write_status: Callable[[], bool],
        record_error: Callable[[Exception], None],
        recovery_for: Callable[[aiosqlite.Connection], Awaitable[Recovery | None]],
        backend: Callable[[], MemoryBackend | None],
        ingester: Callable[[], Ingester | None],
        distill_conn: aiosqlite.Connection | None,
        foreground_busy: Callable[[], bool],
    ) -> None:
        self.conn = conn
        #: The settings at start-up (paths, intervals); `_current` is the reloaded ones.
        self.settings = settings()
        self._current = settings
        self.clock = clock
        self.stop_event = stop_event
        self._sync_lock = sync_lock
        self._store_conns = store_conns
        self._status = status
        self._write_status = write_status
        self._record_error = record_error
        self._recovery_for = recovery_for
        self._backend = backend
        self._ingester = ingester
        self._distill_conn = distill_conn
        self._distiller: Distiller | None = None
        self._foreground_busy = foreground_busy
        self._release = ReleaseDue()
        self._relabelled = self._upgraded = False
        self._embedding_error: str | None = None
        self._embedding = Throughput()

    def periodic(self) -> list[PeriodicJob]:
        """Every job with its interval (`distill` only with a model configured)."""
        settings = self.settings
        return [
            PeriodicJob("expire_stale_sessions", settings.lifecycle_check_interval,
                        self._expire),
            PeriodicJob("recover_unsynced", settings.sync_check_interval, self._recover),
            PeriodicJob("embed_pending", EMBED_INTERVAL, self._embed, exclusive=False),
            PeriodicJob("outbox_drain", OUTBOX_INTERVAL, self._drain_outbox, exclusive=False),
            PeriodicJob("integrity_check", INTEGRITY_INTERVAL, self._check_integrity,
                        exclusive=False),
            *([PeriodicJob("distill", DISTILL_INTERVAL, self._distill, exclusive=False,
                           interruptible=True)] if self._distill_conn is not None else []),
            PeriodicJob("expire_audit", AUDIT_EXPIRY_INTERVAL, self._expire_audit),
            PeriodicJob("retention", AUDIT_EXPIRY_INTERVAL, self._retention,
                        cron=settings.retention.schedule),
        ]

    async def _recover(self) -> None:
        recovery = await self._recovery_for(self.conn)
        if recovery is not None:
            async with self._sync_lock:
                report = await recovery.run()
                ingester = self._ingester()
                if self._release.due(report.segments_saved, quiet=(
                        ingester is not None and ingester.passes_done > 0
                        and not ingester.busy(RELEASE_QUIET))):
                    await self._release_memory()
                if not self.stop_event.is_set():
                    await self._upgrade_step()

    async def _embed(self) -> None:
        # Vectors are computed here, off the ingest and save paths; a slow or
        # absent model only delays hybrid recall of the newest memories. An
        # embedder whose threads take only idle cores (the local model under ONNX
        # Runtime) works through the backlog without pause; any other gets a
        # slice of every interval, so that it never crowds out ingest and recall.
        await self._recovery_for(self.conn)
        backend = vector_queue(self._backend())
        if backend is None:
            return
        unpaused = bool(getattr(backend.embedder, "yields_cores", False))
        if isinstance(backend.embedder, LazyLocalEmbedder):
            # Ingest and clients first: the background threads wait while either is
            # busy (`_foreground_busy`).
            backend.embedder.defer_to = self._foreground_busy
        deadline = self.clock.monotonic() + EMBED_SLICE
        while not self.stop_event.is_set() and (unpaused or self.clock.monotonic() < deadline):
            began = self.clock.monotonic()
            try:
                stored = await backend.embed_pending(limit=EMBED_BATCH)
            except EmbeddingError as exc:
                # Once when it begins (offline, say), not at every try: the backlog
                # waits, keyword recall works meanwhile.
                if self._embedding_error is None:
                    log.warning("embedding_failed", error=str(exc),
                                transient=exc.transient, retrying_every=EMBED_INTERVAL)
                self._embedding_error = str(exc)
                return
            if self._embedding_error is not None:
                log.info("embedding_resumed", failed_with=self._embedding_error)
                self._embedding_error = None
            if stored == 0:
                self._embedding.idle()
                if isinstance(backend.embedder, LazyLocalEmbedder):
                    backend.embedder.release_if_idle(MODEL_IDLE_RELEASE)
                return
            self._embedding.add(stored, self.clock.monotonic() - began,
                                self.clock.monotonic())
            self._status["embedding"] = self._embedding.snapshot()
            self._write_status()

    async def _drain_outbox(self) -> None:
        # What the primary layer missed while it was down, in order, same ids.
        await self._recovery_for(self.conn)
        backend = self._backend()
        if isinstance(backend, ChainBackend):
            while not self.stop_event.is_set() and await backend.drain() == DRAIN_BATCH:
                pass

    async def _distill(self) -> None:
        # Segments saved since, sent to the configured model at a bounded rate; a
        # model that is slow or down delays only this job.
        distiller = await self._distiller_for()
        if distiller is not None:
            await distiller.run()
            self._status["distill"] = await distill_counts(
                distiller.conn, self.clock.now())
            self._write_status()

    async def _check_integrity(self) -> None:
        # A damaged page goes unnoticed until something reads it; writing on into a
        # damaged file can make it worse. Found: stop, say so, exit 74.
        settings = self.settings
        for name, path in (("daemon database", settings.database_path),
                           ("memory database", settings.memory_path)):
            if not path.exists():
                continue
            problems = await asyncio.to_thread(integrity_problems, path)
            if problems:
                self._record_error(StoreDamaged(
                    f"{name} {path} is damaged: {'; '.join(problems[:3])}"
                    " (see `memoryd doctor` and docs/operations.md)"))
                return

    async def _expire_audit(self) -> None:
        settings, clock = self.settings, self.clock
        if await clock_ahead(self.conn, clock, mark=False) is not None:
            return  # a clock set a year ahead must not empty the trail (`clock_trust`)
        before = clock.now() - timedelta(seconds=settings.audit_retention)
        async with self._sync_lock:
            removed = await audit.expire(self.conn, before)
        if await asyncio.to_thread(settings.gateway_ledger_path.exists):
            # Only where a gateway was used: its module brings httpx (12 MB).
            from memoryd.memory.backends.gateway import expire_calls

            removed += await expire_calls(settings.gateway_ledger_path, before)
        if removed:
            log.info("audit_expired", events=removed, before=before.isoformat())

    async def _retention(self) -> None:
        # Daily (retention.schedule): expired memories, old raw text, never a held scope.
        await self._recovery_for(self.conn)
        backend = self._backend()
        if backend is None:
            return
        async with self._sync_lock:
            await Retention(self.conn, backend, self.clock, self._current().retention).run()

    async def _expire(self) -> None:
        stale_after = timedelta(seconds=self._current().stale_session_timeout)
        # The jobs' connection is shared with syncs the API asks for: one at a time.
        async with self._sync_lock:
            await expire_stale_sessions(self.conn, self.clock, stale_after)

    async def _upgrade_step(self) -> None:
        """What is already stored, brought up to how memory is written now: projects named
        by their repository (once), then old segments' text, a step each pass."""
        backend = self._backend()
        if self._upgraded or backend is None:
            return
        if not self._relabelled:
            await relabel_by_repository(self.conn, backend, self.clock)
            self._relabelled = True
        self._upgraded = (await rerender_step(self.conn, backend, self.clock)).done

    async def _release_memory(self) -> None:
        """Once quiet after start-up or a backfill: SQLite's page caches and the freed heap
        back to the system (see TRIM_AFTER_SEGMENTS)."""
        for conn in self._store_conns:
            await shrink_memory(conn)
        await release_memory(self._backend())
        return_freed_memory()
        log.info("memory_released")

    async def _distiller_for(self) -> Distiller | None:
        """The distillation worker, made once the memory backend is open."""
        if self._distiller is None and self._distill_conn is not None:
            await self._recovery_for(self.conn)
            backend = self._backend()
            if backend is None:
                return None
            from memoryd.distill.providers import make_provider

            settings = self._current()
            provider = make_provider(settings.memory.llm, settings.distill_dir)
            self._distiller = Distiller(self._distill_conn, backend, self.clock, settings,
                                        provider, stopping=self.stop_event.is_set)
        return self._distiller

    async def close_distiller(self) -> None:
        if self._distiller is not None:
            await self._distiller.close()
            self._distiller = None
