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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite
import structlog

from memoryd.api.registry import MemoryOps
from memoryd.clock import Clock, utc_text
from memoryd.config import Settings, SourceKind
from memoryd.errors import BackendUnavailable, ConfigError, MemorydError, StoreError
from memoryd.files import atomic_write
from memoryd.hooks.script import refresh_client, stable_client
from memoryd.ingest.ingester import Ingester
from memoryd.ingest.watcher import watch_roots
from memoryd.lifecycle.coverage import check_memory
from memoryd.lifecycle.recovery import Recovery, SyncReport
from memoryd.lifecycle.rerender import skip_if_fresh
from memoryd.lifecycle.scheduling import LifecycleScheduler
from memoryd.lifecycle.sync_policy import recovery_policy
from memoryd.lock import hold_lock
from memoryd.memory import MemoryBackend
from memoryd.memory.embeddings import LazyLocalEmbedder
from memoryd.memory.opening import open_memory_backend
from memoryd.memory.privacy.redaction import prepare as prepare_masking
from memoryd.memory.privacy.redaction import scanner_summary
from memoryd.memory.protocol import vector_queue
from memoryd.notify import Notifier
from memoryd.process import tune_threads
from memoryd.service_jobs import DaemonJobs
from memoryd.status import status_path
from memoryd.store.connection import translate
from memoryd.store.database import open_store

if TYPE_CHECKING:
    from memoryd.ui.server import UiServer

log = structlog.get_logger("memoryd.service")

#: How often the status snapshot (`memoryd status` reads it) is rewritten while busy.
STATUS_INTERVAL = 1.0
#: Background embedding waits until the ingester and the API's clients have been quiet
#: this long.
FOREGROUND_QUIET = 1.0
#: How often WATCHDOG=1 is sent while one pass is busy with many turns.
WATCHDOG_PING_INTERVAL = 1.0
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
        self._recovery: Recovery | None = None
        self._backend: MemoryBackend | None = None
        self._open_lock = asyncio.Lock()
        self._sync_lock = asyncio.Lock()
        self._client_asked_at = float("-inf")
        self._ops: MemoryOps | None = None
        self._ui: UiServer | None = None
        self._ui_lock = asyncio.Lock()
        self._api_conn: aiosqlite.Connection | None = None
        self._jobs_conn: aiosqlite.Connection | None = None
        self._distill_conn: aiosqlite.Connection | None = None
        self._store_conns: list[aiosqlite.Connection] = []
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
                conn, jobs_conn = await self._open_stores(stack)
                jobs = self._jobs(jobs_conn)
                # The distiller's model client, then the memory backend (opened on first use).
                stack.push_async_callback(jobs.close_distiller)
                stack.push_async_callback(self._close_backend)
                scheduler = self._scheduler(jobs)
                ingester, tasks = await self._start_following(conn)
                scheduler.start()
                await self._start_api(stack)
                stack.push_async_callback(self._stop_ui)
                stack.callback(self._cancel_later)
                await self._serve(ingester, tasks, scheduler)
        log.info("stopped")
        if self._damaged is not None:
            raise self._damaged

    async def _open_stores(self, stack: contextlib.AsyncExitStack,
                           ) -> tuple[aiosqlite.Connection, aiosqlite.Connection]:
        """The store's connections (the ingester's, the jobs', the API's, distillation's),
        closed by `stack`; the ingester's and the jobs'."""
        settings = self.settings
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
        self._store_conns = [c for c in (conn, jobs_conn, self._api_conn,
                                         self._distill_conn) if c is not None]
        return conn, jobs_conn

    async def _start_following(self, conn: aiosqlite.Connection,
                               ) -> tuple[Ingester, list[asyncio.Task[None]]]:
        """The ingester, its saved state loaded, and the tasks that follow the transcripts."""
        # Masking's scanner takes a few tenths of a second to build: in a worker
        # thread, while what is masked meanwhile goes through the rules alone.
        self._masking = asyncio.create_task(asyncio.to_thread(_prepare_masking),
                                            name="masking")
        ingester = self._ingester = Ingester(conn, self.settings, self.clock)
        await ingester.load()
        await skip_if_fresh(conn, self.clock.now())
        return ingester, [
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

    async def _start_api(self, stack: contextlib.AsyncExitStack) -> None:
        """The local API on the socket, stopped by `stack`; a socket it cannot serve is
        recorded, and the daemon goes on without it."""
        settings = self.settings
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

    async def _serve(self, ingester: Ingester, tasks: list[asyncio.Task[None]],
                     scheduler: LifecycleScheduler) -> None:
        """Ready: said to systemd and the log; then until stopped, and the jobs stopped."""
        settings = self.settings
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

    async def _close_backend(self) -> None:
        if self._backend is not None:
            await self._backend.close()
            self._backend = None
            self._recovery = None

    def _jobs(self, conn: aiosqlite.Connection) -> DaemonJobs:
        """The periodic jobs, over `conn`, given what they need of the daemon."""
        return DaemonJobs(
            conn, lambda: self.settings, self.clock, stop_event=self.stop_event,
            sync_lock=self._sync_lock, store_conns=self._store_conns,
            status=self.status.extra, write_status=self._write_status,
            record_error=self._record_error, recovery_for=self._recovery_for,
            backend=lambda: self._backend, ingester=lambda: self._ingester,
            distill_conn=self._distill_conn, foreground_busy=self._foreground_busy)

    def _scheduler(self, jobs: DaemonJobs) -> LifecycleScheduler:
        self._scheduler_ = LifecycleScheduler(
            jobs.periodic(), now=self.clock.now,
            on_error=lambda job, exc: self._record_error(exc, job),
            on_success=self._clear_error,
        )
        return self._scheduler_

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

