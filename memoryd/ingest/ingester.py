"""The file server: resolves which file is which, and gives every file a fair turn.

The periodic scan is the source of truth; watch notifications only wake it early.
Files are opened for one turn at a time, so a backfill of thousands of files holds
at most one open, and each turn reads a bounded number of bytes.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.config import Settings, SourceConfig, SourceKind
from memoryd.ingest.discovery import (
    UNREADABLE,
    Candidate,
    Mode,
    classify_any,
    classify_explicit,
    discover,
    unchanged,
)
from memoryd.ingest.identity import SETTLE_NS, Resolver, Tracked
from memoryd.ingest.tailer import Prepared, Tailer, TurnOutcome, TurnResult
from memoryd.store.batches import CommitResult, FileState
from memoryd.store.connection import database_file, disable_autocheckpoint
from memoryd.store.offsets import discard_outcome, load_states, mark_missing, move_state
from memoryd.store.wal import Checkpointer

log = structlog.get_logger("memoryd.ingest")

ProgressCallback = Callable[[int], None]

#: While file notifications cover a file, a pass turns only the files they named (an
#: idle daemon stat'ed each of 10,000 files every poll: 5 % of a core); every file still
#: gets a turn this often, for a notification dropped or coalesced away.
FULL_SWEEP = 30.0
#: Seconds after a watch starts during which `catch_up` walks the roots, not only the
#: files notifications named.
WATCH_SETTLE = 5.0


@dataclass(slots=True)
class PassStats:
    files: int = 0
    bytes_read: int = 0
    messages: int = 0


class Ingester:
    def __init__(self, conn: aiosqlite.Connection, settings: Settings, clock: Clock) -> None:
        self._conn = conn
        self._settings = settings
        self._clock = clock
        self._tailer = Tailer(conn, clock, settings.read_chunk_bytes)
        self._tracked: dict[str, Tracked] = {}
        self._states: list[FileState] = []
        # Every directory the last scan walked, with its mtime: a timed scan whose
        # directories are all unchanged has nothing to find (idle costs ~nothing).
        self._directories: dict[str, int] = {}
        self._rescan_requested = True
        self._hinted: set[str] = set()
        self._explicit: dict[str, Candidate] = {}
        # The same-file rules, and new files held back as possible moves.
        self._identity = Resolver()
        self.wake = asyncio.Event()
        self.sources: list[SourceConfig] = settings.enabled_sources()
        self._passes_started = 0
        self._passes_done = 0
        self._pass_done = asyncio.Condition()
        self._stored_at = float("-inf")  # monotonic time of the last turn that stored
        self._watched: tuple[str, ...] = ()  # roots notifications cover, each with a "/"
        self._swept_at = float("-inf")  # monotonic time of the last pass over every file
        self._sweep_requested = False  # the next pass turns every file (`catch_up`)
        self._watched_since = float("-inf")  # monotonic time the watch last (re)started
        self._unwatched: list[Tracked] | None = None  # `_not_covered`, until the next scan

    def busy(self, within: float = 1.0) -> bool:
        """Whether a turn stored something in the last `within` seconds (a backfill or a
        burst of appends under way). Safe to ask from another thread."""
        return self._clock.monotonic() - self._stored_at < within

    @property
    def passes_done(self) -> int:
        """Passes over the followed files finished since start (the first reads them all)."""
        return self._passes_done

    @property
    def tracked(self) -> dict[str, Tracked]:
        return self._tracked

    async def load(self) -> None:
        """Read every file's saved state; paths are resolved against it on the first scan."""
        self._states = await load_states(self._conn)
        path = await database_file(self._conn)
        if path is not None:
            self._tailer.checkpointer = Checkpointer(path, self._clock)
            await disable_autocheckpoint(self._conn)

    async def settle(self) -> None:
        """Until the background work of the last pass (a checkpoint) has ended."""
        if self._tailer.checkpointer is not None:
            await self._tailer.checkpointer.wait()

    def watching(self, roots: Iterable[Path]) -> None:
        """Which roots file notifications now cover (none: every pass turns every file)."""
        self._watched = tuple(os.path.join(os.path.abspath(root), "") for root in roots)
        self._unwatched = None
        self._watched_since = self._clock.monotonic()
        if not self._watched:
            self._swept_at = float("-inf")

    def _not_covered(self) -> list[Tracked]:
        """The followed files no notification covers (kept until the next scan)."""
        if self._unwatched is None:
            self._unwatched = [t for t in self._tracked.values()
                               if not t.path.startswith(self._watched)]
        return self._unwatched

    def notify(self, paths: Iterable[str]) -> None:
        """A watch notification: a hint that these paths changed."""
        for path in paths:
            if path not in self._tracked and classify_any(path, self.sources) is not None:
                self._rescan_requested = True
        self._hinted.update(paths)
        self.wake.set()

    def follow(self, path: str, kind: SourceKind) -> bool:
        """Follow one transcript an agent named (a hook), even outside the configured roots
        (the API admits only the agent's own directories: `discovery.admit_transcript`).

        False when `path` does not look like a transcript of that agent.
        """
        if "\x00" in path:
            return False
        path = os.path.abspath(path)
        try:
            # Only a regular file: opening a FIFO an agent (or anyone) named would block.
            if not stat.S_ISREG(os.stat(path).st_mode):
                log.warning("transcript_not_a_regular_file", path=path)
                return False
        except (OSError, ValueError):
            return False
        if path in self._tracked or path in self._explicit:
            self.notify([path])
            return True
        candidate = classify_explicit(path, kind)
        if candidate is None:
            return False
        self._explicit[path] = candidate
        self._rescan_requested = True
        self.wake.set()
        return True

    async def catch_up(self) -> None:
        """Wait until a pass that started after this call has read every file to its end."""
        target = self._passes_started + 1
        # The watcher says it covers the roots before its notifications flow (watchfiles
        # sets its watches up later, on its own thread): a transcript created meanwhile is
        # never named, so until the watch has settled a catch-up walks the roots.
        settled = self._clock.monotonic() - self._watched_since >= WATCH_SETTLE
        if self._watched and settled:
            # Notifications have told of every new file (a hinted unknown path asks for a
            # scan itself): a pass over every known file reads what they hold, without
            # walking the roots (0.2 s at 10,000 transcripts, at every session's start).
            self._sweep_requested = True
        else:
            self._rescan_requested = True
        self.wake.set()
        async with self._pass_done:
            await self._pass_done.wait_for(lambda: self._passes_done >= target)

    # -- identity resolution -----------------------------------------------------------

    async def scan(self, *, hold_copies: bool = False) -> None:
        """Match what is on disk against what is stored (identity.Resolver: renames,
        moves by copy, replacements, new files), then commit what moved or went missing.

        `hold_copies` (the running daemon) holds back a new file that may be the copy
        half of a move under way; a one-off pass sees the files as they are.
        """
        self._rescan_requested = False
        found: dict[str, tuple[Candidate, os.stat_result]] = {}
        directories: dict[str, int] = {}
        discovered = list(discover(self.sources, directories))
        for directory, mtime in directories.items():
            # Said once, when a directory becomes unreadable, not on every scan.
            if mtime == UNREADABLE and self._directories.get(directory) != UNREADABLE:
                log.warning("directory_unreadable", path=directory)
        self._directories = directories
        seen = {c.path for c in discovered}
        discovered += [c for p, c in self._explicit.items() if p not in seen]
        for candidate in discovered:
            try:
                found[candidate.path] = (candidate, os.stat(candidate.path))
            except (OSError, ValueError):
                continue
        states = {t.path: t.state for t in self._tracked.values() if t.state is not None}
        for saved in self._states:
            states.setdefault(saved.path, saved)
        self._states = []
        resolution = self._identity.resolve(found, states, self._tracked,
                                            hold_copies=hold_copies,
                                            now=self._clock.monotonic())
        for move in resolution.moves:
            await move_state(self._conn, move.old_path, move.new_path, move.session_id,
                             move.identity, self._clock.now())
            log.info("transcript_moved", old_path=move.old_path, new_path=move.new_path,
                     session_id=move.session_id, by=move.by)
        for state in resolution.missing:
            await mark_missing(self._conn, state.path, True)
            log.info("transcript_missing", path=state.path, session_id=state.session_id)
        self._states = resolution.unclaimed
        self._tracked = resolution.tracked
        self._unwatched = None

    # -- fair turns --------------------------------------------------------------------

    def pending_bytes(self) -> int:
        total = 0
        for tracked in self._tracked.values():
            try:
                size = os.stat(tracked.path).st_size
            except OSError:
                continue
            offset = tracked.state.offset if tracked.state else 0
            if tracked.candidate.mode is Mode.DOCUMENT:
                total += size if tracked.state is None or size != offset else 0
            else:
                total += max(0, size - offset)
        return total

    async def pump(
        self,
        stop: asyncio.Event | None = None,
        progress: ProgressCallback | None = None,
        only: set[str] | None = None,
    ) -> PassStats:
        """Give every file a turn, round after round, until none has anything new.

        With `only`, just those paths and the files no notification covers.

        One commit is in flight while the next file is read and parsed: the store's
        thread writes while this one parses (a backfill's two halves overlap). A file
        whose commit is still in flight waits for it before its next turn.
        """
        stats = PassStats()
        touched: set[str] = set()
        if only is None:
            active = list(self._tracked.values())
        else:
            picked = {path: self._tracked[path] for path in only if path in self._tracked}
            for tracked in self._not_covered():
                picked.setdefault(tracked.path, tracked)
            active = list(picked.values())
        in_flight: tuple[Prepared, asyncio.Task[CommitResult]] | None = None
        still: list[Tracked] = []

        async def settle() -> None:
            nonlocal in_flight
            if in_flight is None:
                return
            prepared, commit = in_flight
            in_flight = None
            result = await self._tailer.finish(prepared, commit)
            self._stored_at = self._clock.monotonic()
            still.append(prepared.tracked)
            touched.add(prepared.tracked.path)
            stats.bytes_read += result.bytes_read
            stats.messages += result.stored
            if progress is not None:
                progress(result.bytes_read)

        try:
            while active:
                still = []
                for tracked in active:
                    if stop is not None and stop.is_set():
                        await settle()
                        return stats
                    if in_flight is not None and in_flight[0].tracked is tracked:
                        await settle()
                    outcome = self._prepare(tracked)
                    if isinstance(outcome, TurnResult):
                        if outcome.outcome is TurnOutcome.RESCAN:
                            self._rescan_requested = True
                        continue
                    await settle()
                    in_flight = (outcome, await self._tailer.submit(outcome))
                await settle()
                active = still
                if self._rescan_requested:
                    break
        finally:
            if in_flight is not None:
                # Cancelled or failed mid-pass: the commit under way still ends as one
                # transaction (the file moves on if it stored); its outcome is not wanted.
                in_flight[1].add_done_callback(discard_outcome)
        stats.files = len(touched)
        return stats

    def _prepare(self, tracked: Tracked) -> Prepared | TurnResult:
        try:
            return self._tailer.prepare(tracked)
        except OSError as exc:
            log.warning("transcript_read_failed", path=tracked.path, error=str(exc))
            return TurnResult(TurnOutcome.IDLE)

    # -- the loop ----------------------------------------------------------------------

    async def run_once(self, progress: ProgressCallback | None = None) -> PassStats:
        """One full pass: scan, then read every file to its end."""
        await self.scan()
        total = PassStats()
        while True:
            stats = await self.pump(progress=progress)
            total.files += stats.files
            total.bytes_read += stats.bytes_read
            total.messages += stats.messages
            if not self._rescan_requested:
                return total
            await self.scan()

    def reconfigure(self, settings: Settings) -> None:
        """New settings (SIGHUP): sources and the poll interval apply from the next scan."""
        self._settings = settings
        self.sources = settings.enabled_sources()
        self._rescan_requested = True
        self.wake.set()

    async def run(
        self,
        stop: asyncio.Event,
        on_pass: Callable[[], None] | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        """Follow every transcript until `stop` is set.

        `on_pass` is called after every pass, `on_progress` after every turn that
        stored something (a long backfill is many turns in one pass).
        """
        next_scan = self._clock.monotonic()
        while not stop.is_set():
            now = self._clock.monotonic()
            scanned = False
            if self._rescan_requested or now >= next_scan:
                # Compared with mtimes, which come from the kernel's clock, not ours.
                if self._rescan_requested or self._identity.holding or not unchanged(
                        self._directories, time.time_ns(), SETTLE_NS):
                    await self.scan(hold_copies=True)
                    scanned = True
                next_scan = now + self._settings.poll_interval
            full = (scanned or self._sweep_requested or not self._watched
                    or now - self._swept_at >= FULL_SWEEP)
            self._sweep_requested = False
            only = None if full else set(self._hinted)
            self._hinted.clear()
            self.wake.clear()
            self._passes_started += 1
            await self.pump(stop, progress=on_progress, only=only)
            if full:
                self._swept_at = now
            async with self._pass_done:
                self._passes_done = self._passes_started
                self._pass_done.notify_all()
            if on_pass is not None:
                on_pass()
            if stop.is_set() or self._rescan_requested:
                continue
            timeout = max(0.0, next_scan - self._clock.monotonic())
            await _wait_any(stop, self.wake, wait_for=timeout)


async def _wait_any(stop: asyncio.Event, wake: asyncio.Event, *, wait_for: float) -> None:
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=wait_for, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
