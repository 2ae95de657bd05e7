"""File notifications as hints: watchfiles tells the ingester which paths changed.

The periodic scan stays the source of truth (notifications can be dropped,
coalesced or unsupported on a network file system); this only makes the common
case fast. Roots that appear after start-up (an agent installed later) are
picked up by re-checking which roots exist every poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog
import watchfiles

log = structlog.get_logger("memoryd.watch")

#: Coalesce bursts briefly; the append-to-commit target is ~100 ms.
DEBOUNCE_MS = 30
STEP_MS = 20


def _transcript_filter(_change: watchfiles.Change, path: str) -> bool:
    return path.endswith((".jsonl", ".json"))


def existing_roots(roots: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(sorted({root for root in roots if root.is_dir()}))


async def watch_roots(
    roots: Callable[[], Iterable[Path]],
    on_paths: Callable[[set[str]], None],
    stop: asyncio.Event,
    recheck_interval: Callable[[], float],
    on_watching: Callable[[tuple[Path, ...]], None] = lambda _roots: None,
) -> None:
    """Call `on_paths` with changed transcript paths until `stop` is set.

    `roots` is asked again every `recheck_interval()` seconds; when the set of
    existing roots changes, the watch is restarted over the new set. `on_watching` is
    told which roots notifications cover (none while the watch is down).
    """
    while not stop.is_set():
        watched = existing_roots(roots())
        if not watched:
            await _sleep_or_stop(stop, recheck_interval())
            continue
        restart = asyncio.Event()
        monitor = asyncio.create_task(_watch_for_new_roots(roots, watched, restart, stop,
                                                           recheck_interval))
        log.info("watching", roots=[str(r) for r in watched])
        on_watching(watched)
        try:
            async for changes in watchfiles.awatch(
                *watched,
                watch_filter=_transcript_filter,
                debounce=DEBOUNCE_MS,
                step=STEP_MS,
                stop_event=_EitherEvent(stop, restart),
                ignore_permission_denied=True,
            ):
                on_paths({path for _change, path in changes})
        except (OSError, RuntimeError) as exc:
            # A root removed while watched, inotify limits: the poll still covers it.
            log.warning("watch_failed", error=str(exc))
            await _sleep_or_stop(stop, recheck_interval())
        finally:
            on_watching(())
            monitor.cancel()


async def _watch_for_new_roots(
    roots: Callable[[], Iterable[Path]],
    watched: tuple[Path, ...],
    restart: asyncio.Event,
    stop: asyncio.Event,
    interval: Callable[[], float],
) -> None:
    while not stop.is_set():
        await _sleep_or_stop(stop, interval())
        if existing_roots(roots()) != watched:
            restart.set()
            return


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


class _EitherEvent:
    """What watchfiles polls from its thread: set when either event is."""

    def __init__(self, *events: asyncio.Event) -> None:
        self._events = events

    def is_set(self) -> bool:
        return any(event.is_set() for event in self._events)

    def set(self) -> None:
        # watchfiles sets its stop event when cancelled; cancellation already stops us.
        pass

