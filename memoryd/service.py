"""The daemon as one object: it owns the lock, the store, the ingester and the watcher.

Start-up order: lock the state directory (one daemon per state_dir), open and
migrate the store, load every file's saved state, then follow the transcripts.
Stop is cooperative and bounded: a signal sets the stop event, the ingester
finishes the transaction in hand, and whatever is still running after
`shutdown_grace` is cancelled (an uncommitted transaction is rolled back, so
nothing is lost: the lines are read again on the next start).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite
import structlog

from memoryd.api.registry import MemoryOps
from memoryd.clock import Clock, utc_text
from memoryd.config import Settings, SourceKind
from memoryd.distill.worker import Distiller
from memoryd.errors import (
    BackendUnavailable,
    ConfigError,
    EmbeddingError,
    MemorydError,
    StoreDamaged,
    StoreError,
)
from memoryd.files import atomic_write
from memoryd.hooks.script import refresh_client, stable_client
from memoryd.ingest.ingester import Ingester
from memoryd.ingest.watcher import watch_roots
from memoryd.lifecycle.clock_trust import clock_ahead
from memoryd.lifecycle.coverage import check_memory
from memoryd.lifecycle.expiry import expire_stale_sessions
from memoryd.lifecycle.recovery import Recovery, SyncReport, recovery_policy
from memoryd.lifecycle.repositories import relabel_by_repository
from memoryd.lifecycle.rerender import rerender_step, skip_if_fresh
from memoryd.lifecycle.retention import Retention
from memoryd.lifecycle.scheduling import LifecycleScheduler, PeriodicJob
from memoryd.lifecycle.throughput import Throughput
from memoryd.lock import hold_lock
from memoryd.memory import MemoryBackend
from memoryd.memory.chain import DRAIN_BATCH, ChainBackend
from memoryd.memory.embeddings import LazyLocalEmbedder
from memoryd.memory.opening import open_memory_backend
from memoryd.memory.privacy.redaction import prepare as prepare_masking
from memoryd.memory.privacy.redaction import scanner_summary
from memoryd.memory.protocol import release_memory, vector_queue
from memoryd.notify import Notifier
from memoryd.process import return_freed_memory, tune_threads
from memoryd.sqlite import shrink_memory
from memoryd.status import status_path
from memoryd.store import audit
from memoryd.store.connection import integrity_problems, translate
from memoryd.store.database import open_store
from memoryd.store.distill_queue import distill_counts

if TYPE_CHECKING:
    from memoryd.ui.server import UiServer

log = structlog.get_logger("memoryd.service")

#: How often the status snapshot (`memoryd status` reads it) is rewritten while busy.
STATUS_INTERVAL = 1.0
#: Background embedding waits until the ingester and the API's clients have been quiet
#: this long.
FOREGROUND_QUIET = 1.0
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
#: How often WATCHDOG=1 is sent while one pass is busy with many turns.
WATCHDOG_PING_INTERVAL = 1.0
#: The distillation queue is looked at this often (when a model is configured); how many
#: segments a pass sends is bounded by `memory.llm.per_minute`.
DISTILL_INTERVAL = 5.0
#: Back-off bounds after a transient store error (locked database, full disk).
RETRY_MIN, RETRY_MAX = 0.5, 30.0


def _prepare_masking() -> None:
    log.info("masking_scanner_building")
    prepare_masking()
    log.info("masking_scanner_built", how=scanner_summary())


@dataclass(slots=True)
class RuntimeStatus:
    """What only the running daemon knows; written to status.json for `memoryd status`."""

    pid: int
    started_at: str
    passes: int = 0
    last_pass_at: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _write_atomically(path: Path, payload: dict[str, Any]) -> None:
    # Rewritten every second while busy, and worth nothing after a crash: no fsync.
    atomic_write(path, json.dumps(payload), durable=False)


@dataclass(slots=True)
class _ReleaseDue:
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


class Service:
    """`memoryd run`: follows every transcript until stopped."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        notifier: Notifier | None = None,
        reload: Callable[[], Settings] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.notifier = notifier or Notifier({})
        self._reload = reload
        self._ingester: Ingester | None = None
        self._masking: asyncio.Task[None] | None = None
        self._scheduler_: LifecycleScheduler | None = None
        self._relabelled = self._upgraded = False
        self._embedding_error: str | None = None
        self._recovery: Recovery | None = None
        self._backend: MemoryBackend | None = None
        self._open_lock = asyncio.Lock()
        self._sync_lock = asyncio.Lock()
        self._embedding = Throughput()
        self._client_asked_at = float("-inf")
        self._ops: MemoryOps | None = None
        self._ui: UiServer | None = None
        self._ui_lock = asyncio.Lock()
        self._api_conn: aiosqlite.Connection | None = None
        self._jobs_conn: aiosqlite.Connection | None = None
        self._distill_conn: aiosqlite.Connection | None = None
        self._store_conns: list[aiosqlite.Connection] = []
        self._release = _ReleaseDue()
        self._distiller: Distiller | None = None
        self._later: dict[int, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._damaged: MemorydError | None = None
        self._error_source: str | None = None  # what recorded status.last_error
        self.stop_event = asyncio.Event()
        self.ready = asyncio.Event()
        self.status = RuntimeStatus(pid=os.getpid(), started_at=utc_text(clock.now(), "seconds"))
        self._last_status_write = float("-inf")
        self._last_turn_ping = float("-inf")

    def request_stop(self) -> None:
        self.stop_event.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        loop.add_signal_handler(signal.SIGHUP, self.reload)

    def reload(self) -> None:
        """SIGHUP: read the configuration again; sources and intervals apply without a restart.

        A bad configuration is logged and the running one kept. Settings that need
        a restart (state_dir, memory) are reported as such.
        """
        if self._reload is None:
            return
        try:
            new = self._reload()
        except ConfigError as exc:
            log.error("reload_rejected", error=str(exc))
            self._record_error(exc, "config")
            return
        self._clear_error("config")
        old, self.settings = self.settings, new
        needs_restart = [name for name in ("state_dir", "memory", "log_level", "log_format")
                         if getattr(old, name) != getattr(new, name)]
        if needs_restart:
            log.warning("reload_needs_restart", settings=needs_restart)
        if self._ingester is not None:
            self._ingester.reconfigure(new)
        if self._recovery is not None:
            self._recovery.policy = recovery_policy(new)
        if self._scheduler_ is not None:
            self._scheduler_.reschedule("expire_stale_sessions", new.lifecycle_check_interval)
            self._scheduler_.reschedule("recover_unsynced", new.sync_check_interval)
        log.info("reloaded", sources=[f"{s.kind}:{s.root}" for s in new.enabled_sources()],
                 poll_interval=new.poll_interval)

    def _on_signal(self, signum: int) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        self.request_stop()

    async def run(self) -> None:
        settings, clock = self.settings, self.clock
        tune_threads()
        with hold_lock(settings, "run", clock.now()):
            client = stable_client(settings.state_dir)
            if client.exists():
                # An upgrade's client reaches the installed hooks at the daemon's start.
                refresh_client(client)
            async with contextlib.AsyncExitStack() as stack:
                conn = await stack.enter_async_context(open_store(settings))
                # Lifecycle jobs get their own connection: transactions on one
                # connection would interleave with the ingester's.
                jobs_conn = self._jobs_conn = await stack.enter_async_context(
                    open_store(settings))
                # The API's writes (injection records, `ended`) get a third one.
                self._api_conn = await stack.enter_async_context(open_store(settings))
                if settings.memory.llm.enabled:
                    # Distillation waits on a model for seconds: its transactions on a
                    # connection of their own never hold up the jobs' or the API's.
                    self._distill_conn = await stack.enter_async_context(
                        open_store(settings))
                    stack.push_async_callback(self._close_distiller)
                stack.push_async_callback(self._close_backend)
                self._store_conns = [c for c in (conn, jobs_conn, self._api_conn,
                                                 self._distill_conn) if c is not None]
                scheduler = self._scheduler(jobs_conn)
                # Masking's scanner takes a few tenths of a second to build: in a worker
                # thread, while what is masked meanwhile goes through the rules alone.
                self._masking = asyncio.create_task(asyncio.to_thread(_prepare_masking),
                                                    name="masking")
                ingester = self._ingester = Ingester(conn, settings, clock)
                await ingester.load()
                await skip_if_fresh(conn, clock.now())
                tasks = [
                    asyncio.create_task(self._ingest_loop(ingester), name="ingest"),
                    asyncio.create_task(
                        watch_roots(
                            lambda: [s.root for s in ingester.sources],
                            ingester.notify,
                            self.stop_event,
                            lambda: self.settings.poll_interval,
                            ingester.watching,
                        ),
                        name="watch",
                    ),
                ]
                scheduler.start()
                # aiohttp is the daemon's alone: commands that import this module skip it.
                from memoryd.api.server import ApiServer, make_app
                from memoryd.service_units import log_location

                where = log_location(dict(os.environ), Path.home(), os.getpid())
                api = ApiServer(settings.socket_path, make_app(
                    self._api_ops, self._api_status, self._client_asked, where,
                    on_damage=lambda exc: self._record_error(exc, "api")))
                try:
                    await api.start()
                except (OSError, MemorydError) as exc:
                    # Ingestion and recovery matter more than the API: hooks and tools
                    # fall back to the stores.
                    log.error("api_unavailable", socket=str(settings.socket_path),
                              error=str(exc))
                    self._record_error(exc, "api")
                else:
                    stack.push_async_callback(api.stop)
                stack.push_async_callback(self._stop_ui)
                stack.callback(self._cancel_later)
                self.ready.set()
                self._write_status(force=True)
                self.notifier.ready(self._status_line())
                log.info("started", state_dir=str(settings.state_dir),
                         memory=",".join(settings.memory.backends),
                         sources=[f"{s.kind}:{s.root}" for s in ingester.sources])
                try:
                    await self._supervise(tasks)
                except Exception as exc:
                    if self._damaged is not None:
                        # What failed on the way out is the damage's doing: exit 74.
                        raise self._damaged from exc
                    raise
                finally:
                    self.notifier.stopping()
                    await scheduler.stop(settings.shutdown_grace)
        log.info("stopped")
        if self._damaged is not None:
            raise self._damaged

    async def _recovery_for(self, conn: aiosqlite.Connection) -> Recovery | None:
        """The recovery worker, opening the memory backend on first use.

        A backend that cannot be opened (a broken file, a server down) must not
        stop ingestion: the messages wait in the store and the next run tries again.
        """
        async with self._open_lock:
            return await self._open_recovery(conn)

    async def _open_recovery(self, conn: aiosqlite.Connection) -> Recovery | None:
        if self._recovery is None:
            try:
                # A memory that lost what it held is not opened anew silently: the
                # archive keeps ingesting until `memoryd rebuild-memory`.
                await check_memory(conn, self.settings)
                self._backend = await open_memory_backend(self.settings, self.clock)
            except (MemorydError, OSError) as exc:
                log.warning("memory_backend_unavailable", error=str(exc))
                self._record_error(exc, "memory_backend")
                return None
            self._clear_error("memory_backend")
            queue = vector_queue(self._backend)
            if queue is not None and isinstance(queue.embedder, LazyLocalEmbedder):
                # A hook's recall never waits for the model: it loads now, behind the
                # first requests, and again behind the first query after a release.
                queue.embedder.queries_wait = False
                queue.embedder.prepare()
            self._recovery = Recovery(conn, self._backend, self.clock,
                                      recovery_policy(self.settings),
                                      stopping=self.stop_event.is_set)
        return self._recovery

    # -- the local API (`memoryd.api`) -------------------------------------------------

    async def _upgrade_step(self, conn: aiosqlite.Connection) -> None:
        """What is already stored, brought up to how memory is written now: projects named
        by their repository (once), then old segments' text, a step each pass."""
        if self._upgraded or self._backend is None:
            return
        if not self._relabelled:
            await relabel_by_repository(conn, self._backend, self.clock)
            self._relabelled = True
        self._upgraded = (await rerender_step(conn, self._backend, self.clock)).done

    def _client_asked(self) -> None:
        self._client_asked_at = self.clock.monotonic()

    def _foreground_busy(self) -> bool:
        """Whether the daemon's own work is under way: a turn stored messages, or a client
        asked something, in the last FOREGROUND_QUIET seconds. Asked from other threads."""
        ingester = self._ingester
        return ((ingester is not None and ingester.busy(FOREGROUND_QUIET))
                or self.clock.monotonic() - self._client_asked_at < FOREGROUND_QUIET)

    async def _api_ops(self) -> MemoryOps:
        if self._ops is None:
            assert self._jobs_conn is not None and self._api_conn is not None
            await self._recovery_for(self._jobs_conn)
            if self._backend is None:
                raise self._backend_unavailable()
            self._ops = MemoryOps(self.settings, self.clock, self._api_conn, self._backend,
                                  self)
        return self._ops

    def _backend_unavailable(self) -> BackendUnavailable:
        return BackendUnavailable("cannot be opened right now (see `memoryd status`)",
                                  backend="+".join(self.settings.memory.backends))

    async def open_ui(self) -> str:
        """Start the web viewer on first use (and again after it stopped, idle)."""
        async with self._ui_lock:
            if self._ui is None or not self._ui.running:
                # Starlette, Jinja2 and uvicorn load only when someone opens the viewer.
                from memoryd.ui.data import ViewerData
                from memoryd.ui.server import UiServer

                data = ViewerData(self.settings, self.clock, self._api_ops, self._api_status)
                self._ui = UiServer(data)
                await self._ui.start()
            return self._ui.url

    async def _stop_ui(self) -> None:
        if self._ui is not None and self._ui.running:
            await self._ui.stop()

    async def _api_status(self) -> dict[str, Any]:
        from memoryd.status import collect_status

        # The daemon's own backend once it is open: not another one (and its embedder) per ask.
        return await collect_status(self.settings, self.clock, self._backend)

    async def follow(self, path: str, kind: SourceKind, *, read_to_end: bool) -> None:
        """Follow a transcript a hook named; with `read_to_end`, wait until it is stored."""
        ingester = self._ingester
        if ingester is None or not ingester.follow(path, kind):
            return
        if read_to_end:
            try:
                async with asyncio.timeout(max(self.settings.agents.hook_timeout, 5.0)):
                    await ingester.catch_up()
            except TimeoutError:
                log.warning("catch_up_timed_out", path=path)

    async def catch_up(self, seconds: float) -> None:
        """Read what the transcripts hold now (a pass over them), for at most `seconds`."""
        ingester = self._ingester
        if ingester is None:
            return
        try:
            async with asyncio.timeout(seconds):
                await ingester.catch_up()
        except TimeoutError:
            log.info("catch_up_cut_short", seconds=seconds)

    async def sync(self, session_id: int | None, *,
                   settle_questions: bool = False) -> SyncReport:
        """Save unsynced messages (of one session) to memory now, one sync at a time
        (`settle_questions`: see `Recovery.run`)."""
        assert self._jobs_conn is not None
        recovery = await self._recovery_for(self._jobs_conn)
        if recovery is None:
            raise self._backend_unavailable()
        async with self._sync_lock:
            return await recovery.run(force=True, session_id=session_id,
                                      settle_questions=settle_questions)

    def sync_later(self, session_id: int, delay: float, *,
                   settle_questions: bool = False) -> None:
        """A debounced sync: a later ask for the same session replaces an earlier one."""
        previous = self._later.pop(session_id, None)
        if previous is not None:
            previous.cancel()

        def start() -> None:
            self._later.pop(session_id, None)
            if self.stop_event.is_set():
                return
            task = asyncio.create_task(self._sync_quietly(session_id, settle_questions))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        self._later[session_id] = asyncio.get_running_loop().call_later(delay, start)

    async def _sync_quietly(self, session_id: int, settle_questions: bool) -> None:
        try:
            await self.sync(session_id, settle_questions=settle_questions)
        except MemorydError as exc:
            log.warning("debounced_sync_failed", session_id=session_id, error=str(exc))

    def _cancel_later(self) -> None:
        for handle in self._later.values():
            handle.cancel()
        self._later.clear()
        for task in self._background:
            task.cancel()

    async def _release_memory(self) -> None:
        """Once quiet after start-up or a backfill: SQLite's page caches and the freed heap
        back to the system (see TRIM_AFTER_SEGMENTS)."""
        for conn in self._store_conns:
            await shrink_memory(conn)
        await release_memory(self._backend)
        return_freed_memory()
        log.info("memory_released")

    async def _close_backend(self) -> None:
        if self._backend is not None:
            await self._backend.close()
            self._backend = None
            self._recovery = None

    def _scheduler(self, conn: aiosqlite.Connection) -> LifecycleScheduler:
        settings, clock = self.settings, self.clock

        async def recover() -> None:
            recovery = await self._recovery_for(conn)
            if recovery is not None:
                async with self._sync_lock:
                    report = await recovery.run()
                    ingester = self._ingester
                    if self._release.due(report.segments_saved, quiet=(
                            ingester is not None and ingester.passes_done > 0
                            and not ingester.busy(RELEASE_QUIET))):
                        await self._release_memory()
                    if not self.stop_event.is_set():
                        await self._upgrade_step(conn)

        async def embed() -> None:
            # Vectors are computed here, off the ingest and save paths; a slow or
            # absent model only delays hybrid recall of the newest memories. An
            # embedder whose threads take only idle cores (the local model under ONNX
            # Runtime) works through the backlog without pause; any other gets a
            # slice of every interval, so that it never crowds out ingest and recall.
            await self._recovery_for(conn)
            backend = vector_queue(self._backend)
            if backend is None:
                return
            unpaused = bool(getattr(backend.embedder, "yields_cores", False))
            if isinstance(backend.embedder, LazyLocalEmbedder):
                # Ingest and clients first: the background threads wait while either is
                # busy (`_foreground_busy`).
                backend.embedder.defer_to = self._foreground_busy
            deadline = clock.monotonic() + EMBED_SLICE
            while not self.stop_event.is_set() and (unpaused or clock.monotonic() < deadline):
                began = clock.monotonic()
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
                self._embedding.add(stored, clock.monotonic() - began, clock.monotonic())
                self.status.extra["embedding"] = self._embedding.snapshot()
                self._write_status()

        async def drain_outbox() -> None:
            # What the primary layer missed while it was down, in order, same ids.
            await self._recovery_for(conn)
            backend = self._backend
            if isinstance(backend, ChainBackend):
                while not self.stop_event.is_set() and await backend.drain() == DRAIN_BATCH:
                    pass

        async def distill() -> None:
            # Segments saved since, sent to the configured model at a bounded rate; a
            # model that is slow or down delays only this job.
            distiller = await self._distiller_for()
            if distiller is not None:
                await distiller.run()
                self.status.extra["distill"] = await distill_counts(
                    distiller.conn, clock.now())
                self._write_status()

        async def check_integrity() -> None:
            # A damaged page goes unnoticed until something reads it; writing on into a
            # damaged file can make it worse. Found: stop, say so, exit 74.
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

        async def expire_audit() -> None:
            if await clock_ahead(conn, clock, mark=False) is not None:
                return  # a clock set a year ahead must not empty the trail (`clock_trust`)
            before = clock.now() - timedelta(seconds=settings.audit_retention)
            async with self._sync_lock:
                removed = await audit.expire(conn, before)
            if await asyncio.to_thread(settings.gateway_ledger_path.exists):
                # Only where a gateway was used: its module brings httpx (12 MB).
                from memoryd.memory.backends.gateway import expire_calls

                removed += await expire_calls(settings.gateway_ledger_path, before)
            if removed:
                log.info("audit_expired", events=removed, before=before.isoformat())

        async def retention() -> None:
            # Daily (retention.schedule): expired memories, old raw text, never a held scope.
            await self._recovery_for(conn)
            if self._backend is None:
                return
            async with self._sync_lock:
                await Retention(conn, self._backend, clock, self.settings.retention).run()

        async def expire() -> None:
            stale_after = timedelta(seconds=self.settings.stale_session_timeout)
            # The jobs' connection is shared with syncs the API asks for: one at a time.
            async with self._sync_lock:
                await expire_stale_sessions(conn, clock, stale_after)

        self._scheduler_ = LifecycleScheduler(
            [PeriodicJob("expire_stale_sessions", settings.lifecycle_check_interval, expire),
             PeriodicJob("recover_unsynced", settings.sync_check_interval, recover),
             PeriodicJob("embed_pending", EMBED_INTERVAL, embed, exclusive=False),
             PeriodicJob("outbox_drain", OUTBOX_INTERVAL, drain_outbox, exclusive=False),
             PeriodicJob("integrity_check", INTEGRITY_INTERVAL, check_integrity,
                         exclusive=False),
             *([PeriodicJob("distill", DISTILL_INTERVAL, distill, exclusive=False,
                           interruptible=True)]
               if self._distill_conn is not None else []),
             PeriodicJob("expire_audit", AUDIT_EXPIRY_INTERVAL, expire_audit),
             PeriodicJob("retention", AUDIT_EXPIRY_INTERVAL, retention,
                         cron=settings.retention.schedule)],
            now=clock.now,
            on_error=lambda job, exc: self._record_error(exc, job),
            on_success=self._clear_error,
        )
        return self._scheduler_

    async def _distiller_for(self) -> Distiller | None:
        """The distillation worker, made once the memory backend is open."""
        if self._distiller is None and self._distill_conn is not None:
            assert self._jobs_conn is not None
            await self._recovery_for(self._jobs_conn)
            if self._backend is None:
                return None
            from memoryd.distill.providers import make_provider

            provider = make_provider(self.settings.memory.llm, self.settings.distill_dir)
            self._distiller = Distiller(self._distill_conn, self._backend, self.clock,
                                        self.settings, provider,
                                        stopping=self.stop_event.is_set)
        return self._distiller

    async def _close_distiller(self) -> None:
        if self._distiller is not None:
            await self._distiller.close()
            self._distiller = None

    async def _supervise(self, tasks: list[asyncio.Task[None]]) -> None:
        stop_waiter = asyncio.create_task(self.stop_event.wait())
        done, _ = await asyncio.wait([*tasks, stop_waiter], return_when=asyncio.FIRST_COMPLETED)
        self.stop_event.set()
        _, still_running = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace)
        for task in still_running:
            log.warning("shutdown_grace_exceeded", task=task.get_name())
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stop_waiter.cancel()
        for task in tasks:
            if task in done and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        self._write_status(force=True)

    async def _ingest_loop(self, ingester: Ingester) -> None:
        delay = RETRY_MIN
        while not self.stop_event.is_set():
            try:
                await ingester.run(self.stop_event, on_pass=self._after_pass,
                                   on_progress=self._after_turn)
                return
            except StoreError as exc:
                if not exc.transient:
                    self._record_error(exc, "ingest")
                    raise
                self._record_error(exc, "ingest")
                log.warning("store_busy_backing_off", error=str(exc), retry_in=delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_event.wait(), timeout=delay)
                delay = min(delay * 2, RETRY_MAX)

    def _after_pass(self) -> None:
        # Called by the ingest loop after every pass: a stuck loop stops the watchdog.
        self.status.passes += 1
        self.status.last_pass_at = utc_text(self.clock.now(), "seconds")
        self._clear_error("ingest")
        self.notifier.watchdog()
        if self._write_status():
            self.notifier.status(self._status_line())

    def _after_turn(self, _bytes_read: int) -> None:
        # A long backfill is one pass of many turns: keep the watchdog fed meanwhile.
        now = self.clock.monotonic()
        if now - self._last_turn_ping >= WATCHDOG_PING_INTERVAL:
            self._last_turn_ping = now
            self.notifier.watchdog()

    def _status_line(self) -> str:
        line = (f"following {len(self.settings.enabled_sources())} sources, "
                f"{self.status.passes} passes, last at {self.status.last_pass_at or '-'}")
        if self.status.last_error:
            line += f"; last error: {self.status.last_error[:120]}"
        return line

    def _clear_error(self, source: str) -> None:
        """`source` works again: its error no longer shows in `status` (damage stays)."""
        if self._error_source == source and self._damaged is None:
            self._error_source = None
            self.status.last_error = self.status.last_error_at = None
            self._write_status(force=True)

    def _record_error(self, exc: Exception, source: str = "daemon") -> None:
        if isinstance(exc, sqlite3.Error):
            exc = translate(exc)  # an error no boundary translated, damage included
        self._error_source = source
        self.status.last_error = str(exc)
        self.status.last_error_at = utc_text(self.clock.now(), "seconds")
        if isinstance(exc, MemorydError) and exc.damaged and self._damaged is None:
            # Writing on into a damaged database can only make it worse: stop, and
            # `run` exits with EX_DAMAGED (74), which the service units do not restart.
            self._damaged = exc
            log.error("database_damaged", error=str(exc))
            self.request_stop()
        self._write_status(force=True)

    def _write_status(self, force: bool = False) -> bool:
        now = self.clock.monotonic()
        if not force and now - self._last_status_write < STATUS_INTERVAL:
            return False
        self._last_status_write = now
        try:
            _write_atomically(status_path(self.settings), {
                "pid": self.status.pid,
                "started_at": self.status.started_at,
                "passes": self.status.passes,
                "last_pass_at": self.status.last_pass_at,
                "last_error": self.status.last_error,
                "last_error_at": self.status.last_error_at,
                "running": not self.stop_event.is_set(),
                **self.status.extra,
            })
        except OSError as exc:
            log.warning("status_write_failed", error=exc.strerror)
        return True

