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

import aiosqlite
import structlog

from daemon.clock import Clock
from daemon.config import Settings, SourceConfig, SourceKind
from daemon.ingest.discovery import (
    UNREADABLE,
    Candidate,
    Mode,
    classify_any,
    classify_explicit,
    discover,
    unchanged,
)
from daemon.ingest.fingerprint import MARKER_BYTES, SETTLE_NS, digest
from daemon.ingest.tailer import (
    Prepared,
    Tailer,
    Tracked,
    TurnOutcome,
    TurnResult,
    open_transcript,
)
from daemon.store.connection import database_file, disable_autocheckpoint
from daemon.store.offsets import discard_outcome, load_states, mark_missing, move_state
from daemon.store.records import CommitResult, FileState
from daemon.store.wal import Checkpointer

log = structlog.get_logger("memoryd.ingest")

#: A directory modified this recently is scanned again whatever its mtime says.

#: How long a new file named like a live transcript elsewhere waits, once it stops
#: changing, for its original to go (`mv` across file systems copies, then deletes).
MOVE_GRACE = 5.0

ProgressCallback = Callable[[int], None]


@dataclass(slots=True)
class PassStats:
    files: int = 0
    bytes_read: int = 0
    messages: int = 0


def _head_of(path: str, limit: int = 1 << 22) -> str | None:
    """The hash of the file's first line with its newline (its identity's head), or None."""
    try:
        fd, _st = open_transcript(path)
    except OSError:
        return None
    try:
        data = b""
        while len(data) < limit:
            chunk = os.pread(fd, 65536, len(data))
            if not chunk:
                return None
            newline = chunk.find(b"\n")
            if newline >= 0:
                return digest(data + chunk[:newline + 1])
            data += chunk
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def _same_prefix(path: str, state: FileState) -> bool:
    """Whether the bytes just before the saved offset (the marker) are the same in `path`."""
    if state.offset == 0 or not state.marker_hash:
        return True
    try:
        fd, _st = open_transcript(path)
    except OSError:
        return False
    try:
        start = max(0, state.offset - MARKER_BYTES)
        return digest(os.pread(fd, state.offset - start, start)) == state.marker_hash
    except OSError:
        return False
    finally:
        os.close(fd)


def _same_head(path: str, state: FileState) -> bool:
    try:
        fd, _st = open_transcript(path)
    except OSError:
        return False
    try:
        head = os.pread(fd, state.head_length, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return len(head) == state.head_length and digest(head) == state.head_hash


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
        # New files held back as possible moves: path -> ((size, mtime), since).
        self._held: dict[str, tuple[tuple[int, int], float]] = {}
        self.wake = asyncio.Event()
        self.sources: list[SourceConfig] = settings.enabled_sources()
        self._passes_started = 0
        self._passes_done = 0
        self._pass_done = asyncio.Condition()
        self._stored_at = float("-inf")  # monotonic time of the last turn that stored

    def busy(self, within: float = 1.0) -> bool:
        """Whether a turn stored something in the last `within` seconds (a backfill or a
        burst of appends under way). Safe to ask from another thread."""
        return self._clock.monotonic() - self._stored_at < within

    @property
    def tracked(self) -> dict[str, Tracked]:
        return self._tracked

    async def load(self) -> None:
        """Read every file's saved state; paths are resolved against it on the first scan."""
        self._states = await load_states(self._conn)
        path = await database_file(self._conn)
        if path is not None:
            self._tailer.checkpointer = Checkpointer(path)
            await disable_autocheckpoint(self._conn)

    async def settle(self) -> None:
        """Until the background work of the last pass (a checkpoint) has ended."""
        if self._tailer.checkpointer is not None:
            await self._tailer.checkpointer.wait()

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
        self._rescan_requested = True
        self.wake.set()
        async with self._pass_done:
            await self._pass_done.wait_for(lambda: self._passes_done >= target)

    # -- identity resolution -----------------------------------------------------------

    async def scan(self, *, hold_copies: bool = False) -> None:
        """Match what is on disk against what is stored: renames, replacements, new files.

        With `hold_copies` (the running daemon), a new file named like a live transcript
        in another directory waits until it has been still for MOVE_GRACE: it is most
        likely a move across file systems under way, whose original is deleted once the
        copy is complete. Agents name transcripts after their session (a resumed session
        gets a new name), so nothing an agent writes is held. A one-off pass holds
        nothing: it sees the files as they are.
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
        # Several saved states can share an inode (a file emptied and rewritten, then
        # moved): the one whose first line matches is the file that moved.
        by_inode: dict[tuple[int, int], list[FileState]] = {}
        for known_state in states.values():
            if known_state.head_hash != "document":
                by_inode.setdefault((known_state.device, known_state.inode), []).append(
                    known_state)
        tracked: dict[str, Tracked] = {}
        claimed: set[str] = set()

        # 1. Same path, same file.
        for path, (candidate, st) in found.items():
            known = states.get(path)
            if known is not None and (known.device, known.inode) == (st.st_dev, st.st_ino):
                tracked[path] = self._keep(path, candidate, known)
                claimed.add(path)
        # 2. A known file at a new path: renamed or moved, it continues where it was.
        for path, (candidate, st) in found.items():
            if path in tracked or candidate.mode is Mode.DOCUMENT:
                continue
            moved = next(
                (c for c in by_inode.get((st.st_dev, st.st_ino), ())
                 if c.path not in claimed and _same_head(path, c)),
                None,
            )
            if moved is None:
                continue
            await move_state(self._conn, moved, path, self._clock.now())
            log.info("transcript_moved", old_path=moved.path, new_path=path,
                     session_id=moved.session_id)
            # The row of any other file once at `path` went with the move (move_state).
            claimed.update((moved.path, path))
            moved.path = path
            tracked[path] = Tracked(candidate, moved)
        # 2b. Moved by copy (across file systems: copied, then the original deleted): a new
        # path whose content begins as a known file's that is gone continues its session.
        # (While the original is still there, a file beginning like it is a new session:
        # agents replay a history into a new file when a session is resumed.)
        by_head: dict[str, list[FileState]] = {}
        for known_state in states.values():
            if known_state.head_length and known_state.head_hash != "document":
                by_head.setdefault(known_state.head_hash, []).append(known_state)
        # In path order: of two new files beginning alike, the first continues the session.
        for path, (candidate, st) in sorted(found.items()):
            if (path in tracked or candidate.mode is Mode.DOCUMENT or not by_head
                    or self._known_here(path, states)):
                continue  # (a new file already read as new in an earlier scan stays new)
            head = _head_of(path)
            # Several gone files may begin alike (a history replayed into each): the copy
            # continues the newest session of them.
            gone = max((c for c in by_head.get(head or "", ())
                        if c.path not in found and c.path not in claimed
                        and st.st_size >= c.offset and _same_prefix(path, c)),
                       key=lambda c: c.session_id, default=None)
            if gone is not None:
                await move_state(self._conn, gone, path, self._clock.now(),
                                 (st.st_dev, st.st_ino))
                log.info("transcript_moved", old_path=gone.path, new_path=path,
                         session_id=gone.session_id, by="content")
                claimed.update((gone.path, path))
                gone.path, gone.device, gone.inode = path, st.st_dev, st.st_ino
                gone.missing = False
                # Read again from the start, matching what is stored (as for a file
                # replaced in place): a copy adds only what came after, and a file that
                # merely begins alike loses nothing.
                tracked[path] = Tracked(candidate, gone, verify=True)
        # 3. A known path that now names another file: replaced, checked before reading.
        # 4. Anything else is new, unless it may be the copy half of a move (held back).
        live_names = {os.path.basename(p): p for p, s in states.items()
                      if p in found and s.head_hash != "document"}
        held, self._held = self._held, {}
        for path, (candidate, st) in found.items():
            if path in tracked:
                continue
            replaced = states.get(path)
            if replaced is not None and path not in claimed:
                claimed.add(path)
                previous = self._tracked.get(path)
                tracked[path] = Tracked(candidate, replaced, verify=True,
                                        rejected_logged=bool(previous and previous.rejected_logged))
            else:
                twin = live_names.get(os.path.basename(path))
                if (hold_copies and twin is not None and twin != path
                        and path not in self._tracked and candidate.mode is not Mode.DOCUMENT
                        and self._hold(path, st, held.get(path), twin)):
                    continue
                tracked[path] = self._tracked.get(path) or Tracked(candidate)
                if tracked[path].state is not None:  # its state was taken by a rename
                    tracked[path] = Tracked(candidate)
        # What was stored but is no longer on disk keeps its session and messages.
        for path, state in states.items():
            if path not in claimed and not state.missing:
                state.missing = True
                await mark_missing(self._conn, path, True)
                log.info("transcript_missing", path=path, session_id=state.session_id)
            if path not in claimed:
                self._states.append(state)
        self._tracked = tracked

    def _known_here(self, path: str, states: dict[str, FileState]) -> bool:
        """Whether `path` names a file this ingester already knows there. A path whose
        file was just found renamed elsewhere (step 2) is not: what now lies there is new,
        and may be the copy half of another move."""
        known = states.get(path)
        if known is not None and known.path == path:
            return True
        previous = self._tracked.get(path)
        return previous is not None and (previous.state is None or previous.state.path == path)

    def _hold(self, path: str, st: os.stat_result,
              held: tuple[tuple[int, int], float] | None, twin: str) -> bool:
        """Whether to hold back `path` for this scan; it waits until still for MOVE_GRACE."""
        now = self._clock.monotonic()
        shape = (st.st_size, st.st_mtime_ns)
        if held is None:
            log.info("transcript_held", path=path, same_name_as=twin,
                     wait_s=MOVE_GRACE, reason="a move across file systems may be under way")
        elif held[0] == shape and now - held[1] >= MOVE_GRACE:
            log.info("transcript_released", path=path, same_name_as=twin)
            return False
        since = held[1] if held is not None and held[0] == shape else now
        self._held[path] = (shape, since)
        return True

    def _keep(self, path: str, candidate: Candidate, state: FileState) -> Tracked:
        current = self._tracked.get(path)
        if current is not None and current.state is state:
            return current
        return Tracked(candidate, state)

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
    ) -> PassStats:
        """Give every file a turn, round after round, until none has anything new.

        One commit is in flight while the next file is read and parsed: the store's
        thread writes while this one parses (a backfill's two halves overlap). A file
        whose commit is still in flight waits for it before its next turn.
        """
        stats = PassStats()
        touched: set[str] = set()
        active = list(self._tracked.values())
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
            if self._rescan_requested or now >= next_scan:
                # Compared with mtimes, which come from the kernel's clock, not ours.
                if self._rescan_requested or self._held or not unchanged(
                        self._directories, time.time_ns(), SETTLE_NS):
                    await self.scan(hold_copies=True)
                next_scan = now + self._settings.poll_interval
            self._hinted.clear()
            self.wake.clear()
            self._passes_started += 1
            await self.pump(stop, progress=on_progress)
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
