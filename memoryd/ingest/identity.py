"""File identity: which stored transcript a path on disk is (the same file, renamed,
moved by copy, replaced, rewritten in place, or new), and the fingerprints that decide it.

Paths are not identity: files are renamed and moved, and agents replay earlier
messages into new files, so two files may share a first line. A file is known by its
device and inode plus a hash of its first line (its head), and a saved offset by a
hash of the bytes just before it (its marker), which notices a file rewritten in place.

`Resolver.resolve` holds the rules, without I/O on the store: it says which stored
state each path continues and what moved or went missing; the ingester commits that.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import structlog

from memoryd.errors import NotARegularFile
from memoryd.ingest.discovery import Candidate, Mode
from memoryd.store.batches import FileState

log = structlog.get_logger("memoryd.ingest")

MARKER_BYTES = 64
#: A file modified within this long is still settling: on a file system with coarse
#: timestamps a second change in the same tick would not move its mtime again, so what
#: its size and mtime say is trusted only after it (the tailer's shortcut, the scan's
#: directory check).
SETTLE_NS = 2_000_000_000
#: How long a new file named like a live transcript elsewhere waits, once it stops
#: changing, for its original to go (`mv` across file systems copies, then deletes).
MOVE_GRACE = 5.0
#: The head_hash of a whole-document transcript (Gemini): it is known by its path only.
DOCUMENT = "document"

Shape = tuple[int, int]  # (size, mtime_ns) of a held file
RewriteReason = Literal["replaced", "truncated", "rewritten"]


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def open_transcript(path: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor on the regular file at `path`, and its stat.

    Opened non-blocking so that a FIFO named like a transcript cannot block the
    ingester (a blocking open waits for a writer forever); anything but a
    regular file is closed again and refused with NotARegularFile.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotARegularFile(f"not a regular file: {path}")
    return fd, st


def marker_at(fd: int, offset: int) -> str:
    """The marker of `offset`: the hash of the (up to) MARKER_BYTES bytes before it."""
    start = max(0, offset - MARKER_BYTES)
    return digest(os.pread(fd, offset - start, start))


def head_of(path: str, limit: int = 1 << 22) -> str | None:
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


def same_prefix(path: str, state: FileState) -> bool:
    """Whether the bytes just before the saved offset (the marker) are the same in `path`."""
    if state.offset == 0 or not state.marker_hash:
        return True
    try:
        fd, _st = open_transcript(path)
    except OSError:
        return False
    try:
        return marker_at(fd, state.offset) == state.marker_hash
    except OSError:
        return False
    finally:
        os.close(fd)


def same_head(path: str, state: FileState) -> bool:
    """Whether `path` begins with the first line `state` was known by."""
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


def rewrite_reason(verify: bool, state: FileState, fd: int, size: int) -> RewriteReason | None:
    """Why a followed file must be read again from the start, if it must: another file
    took its path (`verify`), it is shorter than its offset, or the bytes before its
    offset changed. A replacement is read again even when head and marker match: its
    bytes in between may differ, and reading again costs time, never correctness."""
    if verify:
        return "replaced"
    if size < state.offset:
        return "truncated"
    if state.offset > 0 and marker_at(fd, state.offset) != state.marker_hash:
        return "rewritten"
    return None


@dataclass(slots=True)
class Tracked:
    """A transcript the ingester follows; `state` is None until its first line is stored."""

    candidate: Candidate
    state: FileState | None = None
    verify: bool = False  # another file now has this path: read it again from the start
    # (size, hash of the file's last bytes) when a turn found no complete line: a cheap
    # way to skip re-reading a long partial line that has not changed since.
    stalled: tuple[int, str] | None = None
    rejected_logged: bool = False
    # (device, inode, size, mtime_ns), packed, when a turn last found nothing new: a later turn
    # that stats the same is idle without opening the file (an idle daemon's polls).
    idle_stat: bytes | None = None

    @property
    def path(self) -> str:
        return self.candidate.path


@dataclass(frozen=True, slots=True)
class Move:
    """A stored transcript found at a new path: it keeps its session and offset."""

    old_path: str
    new_path: str
    session_id: int
    identity: tuple[int, int]  # (device, inode) at the new path
    by: Literal["inode", "content"]


@dataclass(slots=True)
class Resolution:
    """What a scan found: the files to follow, and what the store must be told, in order."""

    tracked: dict[str, Tracked] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    missing: list[FileState] = field(default_factory=list)  # newly missing: mark them
    unclaimed: list[FileState] = field(default_factory=list)  # kept for the next scan


class Resolver:
    """The same-file rules, with the one state they keep between scans: new files held
    back as the possible copy half of a move."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[Shape, float]] = {}

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def resolve(
        self,
        found: Mapping[str, tuple[Candidate, os.stat_result]],
        states: dict[str, FileState],
        previous: Mapping[str, Tracked],
        *,
        hold_copies: bool,
        now: float,
    ) -> Resolution:
        """Match what is on disk (`found`) against what is stored (`states`, by path) and
        what was followed (`previous`). The states are updated in place (path, device,
        inode, missing) as the store will be once the resolution's moves commit.

        With `hold_copies` (the running daemon), a new file named like a live transcript
        in another directory waits until it has been still for MOVE_GRACE: it is most
        likely a move across file systems under way, whose original is deleted once the
        copy is complete. Agents name transcripts after their session (a resumed session
        gets a new name), so nothing an agent writes is held. A one-off pass holds
        nothing: it sees the files as they are. `now` is a monotonic time.
        """
        out = Resolution()
        claimed: set[str] = set()
        self._same_path(found, states, previous, out, claimed)
        self._renamed(found, states, previous, out, claimed)
        self._copied(found, states, previous, out, claimed)
        self._replaced_or_new(found, states, previous, out, claimed, hold_copies=hold_copies,
                              now=now)
        # What was stored but is no longer on disk keeps its session and messages.
        for path, state in states.items():
            if path not in claimed and not state.missing:
                state.missing = True
                out.missing.append(state)
            if path not in claimed:
                out.unclaimed.append(state)
        return out

    def _same_path(
        self, found: Mapping[str, tuple[Candidate, os.stat_result]],
        states: dict[str, FileState], previous: Mapping[str, Tracked], out: Resolution,
        claimed: set[str],
    ) -> None:
        """1. Same path, same file."""
        tracked = out.tracked
        for path, (candidate, st) in found.items():
            known = states.get(path)
            if known is not None and (known.device, known.inode) == (st.st_dev, st.st_ino):
                known.path = candidate.path  # the same text: one string a file, not two
                current = previous.get(path)
                tracked[path] = (current if current is not None and current.state is known
                                 else Tracked(candidate, known))
                claimed.add(path)

    def _renamed(
        self, found: Mapping[str, tuple[Candidate, os.stat_result]],
        states: dict[str, FileState], previous: Mapping[str, Tracked], out: Resolution,
        claimed: set[str],
    ) -> None:
        """2. A known file at a new path: renamed or moved, it continues where it was."""
        tracked = out.tracked
        # Several saved states can share an inode (a file emptied and rewritten, then
        # moved): the one whose first line matches is the file that moved.
        by_inode: dict[tuple[int, int], list[FileState]] = {}
        for known_state in states.values():
            if known_state.head_hash != DOCUMENT:
                by_inode.setdefault((known_state.device, known_state.inode), []).append(
                    known_state)
        for path, (candidate, st) in found.items():
            if path in tracked or candidate.mode is Mode.DOCUMENT:
                continue
            moved = next(
                (c for c in by_inode.get((st.st_dev, st.st_ino), ())
                 if c.path not in claimed and same_head(path, c)),
                None,
            )
            if moved is None:
                continue
            out.moves.append(Move(moved.path, path, moved.session_id,
                                  (moved.device, moved.inode), "inode"))
            # The row of any other file once at `path` goes with the move (move_state).
            claimed.update((moved.path, path))
            moved.path = path
            tracked[path] = Tracked(candidate, moved)

    def _copied(
        self, found: Mapping[str, tuple[Candidate, os.stat_result]],
        states: dict[str, FileState], previous: Mapping[str, Tracked], out: Resolution,
        claimed: set[str],
    ) -> None:
        """2b. Moved by copy (across file systems: copied, then the original deleted): a new
        path whose content begins as a known file's that is gone continues its session."""
        tracked = out.tracked
        # (While the original is still there, a file beginning like it is a new session:
        # agents replay a history into a new file when a session is resumed.)
        by_head: dict[str, list[FileState]] = {}
        for known_state in states.values():
            if known_state.head_length and known_state.head_hash != DOCUMENT:
                by_head.setdefault(known_state.head_hash, []).append(known_state)
        # In path order: of two new files beginning alike, the first continues the session.
        for path, (candidate, st) in sorted(found.items()):
            if (path in tracked or candidate.mode is Mode.DOCUMENT or not by_head
                    or _known_here(path, states, previous)):
                continue  # (a new file already read as new in an earlier scan stays new)
            head = head_of(path)
            # Several gone files may begin alike (a history replayed into each): the copy
            # continues the newest session of them.
            gone = max((c for c in by_head.get(head or "", ())
                        if c.path not in found and c.path not in claimed
                        and st.st_size >= c.offset and same_prefix(path, c)),
                       key=lambda c: c.session_id, default=None)
            if gone is not None:
                out.moves.append(Move(gone.path, path, gone.session_id,
                                      (st.st_dev, st.st_ino), "content"))
                claimed.update((gone.path, path))
                gone.path, gone.device, gone.inode = path, st.st_dev, st.st_ino
                gone.missing = False
                # Read again from the start, matching what is stored (as for a file
                # replaced in place): a copy adds only what came after, and a file that
                # merely begins alike loses nothing.
                tracked[path] = Tracked(candidate, gone, verify=True)

    def _replaced_or_new(
        self, found: Mapping[str, tuple[Candidate, os.stat_result]],
        states: dict[str, FileState], previous: Mapping[str, Tracked], out: Resolution,
        claimed: set[str], *, hold_copies: bool, now: float,
    ) -> None:
        """3. A known path that now names another file: replaced, checked before reading.
        4. Anything else is new, unless it may be the copy half of a move (held back)."""
        tracked = out.tracked
        live_names = {os.path.basename(p): p for p, s in states.items()
                      if p in found and s.head_hash != DOCUMENT}
        held, self._held = self._held, {}
        for path, (candidate, st) in found.items():
            if path in tracked:
                continue
            replaced = states.get(path)
            if replaced is not None and path not in claimed:
                claimed.add(path)
                before = previous.get(path)
                tracked[path] = Tracked(candidate, replaced, verify=True,
                                        rejected_logged=bool(before and before.rejected_logged))
            else:
                twin = live_names.get(os.path.basename(path))
                if (hold_copies and twin is not None and twin != path
                        and path not in previous and candidate.mode is not Mode.DOCUMENT
                        and self._hold(path, st, held.get(path), twin, now)):
                    continue
                tracked[path] = previous.get(path) or Tracked(candidate)
                if tracked[path].state is not None:  # its state was taken by a rename
                    tracked[path] = Tracked(candidate)

    def _hold(self, path: str, st: os.stat_result, held: tuple[Shape, float] | None,
              twin: str, now: float) -> bool:
        """Whether to hold back `path` for this scan; it waits until still for MOVE_GRACE."""
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


def _known_here(path: str, states: Mapping[str, FileState],
                previous: Mapping[str, Tracked]) -> bool:
    """Whether `path` names a file already known there. A path whose file was just found
    renamed elsewhere (step 2) is not: what now lies there is new, and may be the copy
    half of another move."""
    known = states.get(path)
    if known is not None and known.path == path:
        return True
    before = previous.get(path)
    return before is not None and (before.state is None or before.state.path == path)
