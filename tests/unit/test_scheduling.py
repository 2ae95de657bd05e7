"""The lifecycle scheduler: a transient failure is said once, not at every run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from structlog.testing import capture_logs

from memoryd.errors import StoreBusy
from memoryd.lifecycle.scheduling import LifecycleScheduler, PeriodicJob


def test_a_transient_failure_is_logged_when_it_begins_and_ends() -> None:
    """A database locked by a long backfill failed the recovery job at every run, a
    warning each (four in one benchmark's start); now one when it begins, one when the
    job works again, and a second bout is said again."""
    outcomes = ["busy", "busy", "busy", "ok", "busy", "ok"]

    async def job() -> None:
        if outcomes.pop(0) == "busy":
            raise StoreBusy("database is locked")

    async def run() -> list[dict[str, object]]:
        with capture_logs() as logs:
            scheduler = LifecycleScheduler([PeriodicJob("recover", 0.05, job)],
                                           now=lambda: datetime.now(UTC))
            scheduler.start()
            try:
                for _ in range(200):
                    if not outcomes:
                        break
                    await asyncio.sleep(0.02)
            finally:
                await scheduler.stop(1)
        return logs

    events = [(e["event"], e.get("job")) for e in asyncio.run(run())
              if e["event"] in ("job_failed", "job_recovered")]
    assert not outcomes
    assert events == [("job_failed", "recover"), ("job_recovered", "recover"),
                      ("job_failed", "recover"), ("job_recovered", "recover")]


def test_stopping_drops_an_interruptible_job_at_once_and_grants_the_others_their_grace(
) -> None:
    """A model that never answers kept `memoryd run` from exiting for the whole
    `shutdown_grace` (5.2 s against 2.1 s in `benchmarks.latency --llm-down`): the wait
    is dropped at once; a job that commits as it goes still gets its grace."""
    finished: list[str] = []

    def waiting(name: str, seconds: float) -> PeriodicJob:
        async def run() -> None:
            await asyncio.sleep(seconds)
            finished.append(name)

        return PeriodicJob(name, 60, run, exclusive=False,
                           interruptible=name == "distill")

    async def run() -> tuple[float, list[dict[str, object]]]:
        with capture_logs() as logs:
            scheduler = LifecycleScheduler(
                [waiting("distill", 3600), waiting("recover", 0.5)],
                now=lambda: datetime.now(UTC))
            scheduler.start()
            await asyncio.sleep(0.1)
            loop = asyncio.get_running_loop()
            began = loop.time()
            await scheduler.stop(5)
            return loop.time() - began, logs

    took, logs = asyncio.run(run())
    assert finished == ["recover"]  # granted its grace, not cut short
    assert took < 1.5  # not the grace of 5 s, nor the model's hour
    assert [e.get("job") for e in logs if e["event"] == "job_cancelled"] == ["distill"]
    assert not [e for e in logs if e["event"] == "shutdown_grace_exceeded"]
