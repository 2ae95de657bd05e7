"""The lifecycle jobs on APScheduler (3.x); the only module that imports apscheduler.

Periodic jobs run at start-up and then every interval; cron jobs (`cron`, a
crontab line in local time: the daily retention) at their times only. A job never
overlaps itself (max_instances=1) and missed runs are coalesced into one, so a
machine waking from sleep runs each job once, not once per missed interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from memoryd.errors import MemorydError

log = structlog.get_logger("memoryd.lifecycle")

#: Seconds to wait for cancelled jobs to unwind at a stop.
CANCEL_WAIT = 2.0

Job = Callable[[], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class PeriodicJob:
    name: str
    interval: float  # seconds
    run: Job
    #: Exclusive jobs take turns (they share the lifecycle database connection).
    exclusive: bool = True
    #: A crontab line (local time): the job runs then instead of every `interval`.
    cron: str | None = None
    #: Stopping cancels it at once instead of granting it `shutdown_grace`: what it holds
    #: while it waits is safe to drop (distillation waiting on a model: its work is
    #: committed in steps that a kill at any moment neither loses nor doubles).
    interruptible: bool = False


def cron_trigger(line: str) -> CronTrigger:
    """The trigger of a crontab line in the machine's local time (ValueError if bad)."""
    try:
        return CronTrigger.from_crontab(line)
    except ValueError as exc:
        raise ValueError(f"{line!r} is not a crontab line ({exc})") from None


class _StillRunning(logging.Filter):
    """APScheduler warns each time a job is due while its last run still goes (a long
    embedding backlog: every 5 s). A job that runs long is not a fault: the run is
    coalesced, and the job's own log says when its work begins and ends."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances reached" not in str(record.msg)


def _scheduler_logger() -> logging.Logger:
    logger = logging.getLogger("memoryd.apscheduler")
    if not any(isinstance(f, _StillRunning) for f in logger.filters):
        logger.addFilter(_StillRunning())
    return logger


class LifecycleScheduler:
    def __init__(self, jobs: list[PeriodicJob], now: Callable[[], datetime],
                 on_error: Callable[[str, Exception], None] | None = None,
                 on_success: Callable[[str], None] | None = None) -> None:
        self._scheduler = AsyncIOScheduler(timezone="UTC", logger=_scheduler_logger())
        self._jobs = jobs
        self._now = now
        self._on_error = on_error
        self._on_success = on_success
        # Exclusive jobs share one database connection, so they take turns; the
        # others only never overlap themselves. Stopping waits for all of them.
        self._busy = asyncio.Lock()
        self._own = {job.name: asyncio.Lock() for job in jobs if not job.exclusive}
        self._running: set[asyncio.Task[object]] = set()
        # Each job's transient failure while it lasts: said when it begins and ends only.
        self._failing: dict[str, str] = {}

    def start(self) -> None:
        for job in self._jobs:
            if job.cron is not None:
                self._scheduler.add_job(
                    self._guarded(job), cron_trigger(job.cron), id=job.name, name=job.name,
                    max_instances=1, coalesce=True, misfire_grace_time=None)
                continue
            self._scheduler.add_job(
                self._guarded(job), "interval", seconds=job.interval, id=job.name,
                name=job.name, next_run_time=self._now(), max_instances=1, coalesce=True,
                misfire_grace_time=None,
            )
        self._scheduler.start()

    def reschedule(self, name: str, interval: float) -> None:
        """A job's new interval (configuration reloaded), counted from now."""
        self._scheduler.reschedule_job(name, trigger="interval", seconds=interval)

    async def stop(self, grace: float) -> None:
        """No new runs; let a running job finish within `grace` seconds, then stop."""
        if not self._scheduler.running:
            return
        self._scheduler.pause()
        interruptible = {job.name for job in self._jobs if job.interruptible}
        dropped = [task for task in self._running if task.get_name() in interruptible]
        for task in dropped:
            task.cancel()
        if dropped:
            await asyncio.wait(dropped, timeout=CANCEL_WAIT)

        async def all_idle() -> None:
            for lock in (self._busy, *self._own.values()):
                await lock.acquire()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_idle(), timeout=grace)
        self._scheduler.shutdown(wait=False)
        # Past the grace, what still runs is cancelled (a transaction under way is rolled
        # back; the stores are crash-safe) and awaited, before the stores close under it.
        running = list(self._running)
        for task in running:
            log.warning("shutdown_grace_exceeded", task=task.get_name())
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=CANCEL_WAIT)

    def _guarded(self, job: PeriodicJob) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            task = asyncio.current_task()
            if task is not None:
                task.set_name(job.name)
                self._running.add(task)
            try:
                async with self._busy if job.exclusive else self._own[job.name]:
                    await job.run()
                failed_with = self._failing.pop(job.name, None)
                if failed_with is not None:
                    log.info("job_recovered", job=job.name, failed_with=failed_with)
                if self._on_success is not None:
                    self._on_success(job.name)
            except asyncio.CancelledError:
                # Only `stop` cancels a job, and this is its task's outermost frame:
                # ended here, APScheduler would log the stop as an error with a traceback.
                log.info("job_cancelled", job=job.name)
            except MemorydError as exc:
                # Retried on the next run: a job must never stop the daemon. A transient
                # failure (a database locked by a long backfill) is said once, not at
                # every run until it passes.
                if not exc.transient or job.name not in self._failing:
                    log.warning("job_failed", job=job.name, error=str(exc),
                                transient=exc.transient)
                if exc.transient:
                    self._failing[job.name] = str(exc)
                if self._on_error is not None:
                    self._on_error(job.name, exc)
            except Exception as exc:
                log.error("job_failed", job=job.name, error=f"{type(exc).__name__}: {exc}")
                if self._on_error is not None:
                    self._on_error(job.name, exc)
            finally:
                if task is not None:
                    self._running.discard(task)

        return run
