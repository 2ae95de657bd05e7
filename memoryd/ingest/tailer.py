"""One turn on one file: read from the saved offset, frame complete lines, parse, commit.

The rows a turn read and the file's new offset commit together (store.offsets), so a
crash before the commit re-reads the same lines and a crash after it never does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import struct
import time
from dataclasses import dataclass, field
from enum import Enum

import aiosqlite
import orjson
import structlog

from memoryd.clock import Clock
from memoryd.config import SourceKind
from memoryd.errors import NotARegularFile
from memoryd.ingest.discovery import Candidate, Mode
from memoryd.ingest.framing import Line, LineFramer
from memoryd.ingest.identity import (
    DOCUMENT,
    MARKER_BYTES,
    SETTLE_NS,
    Tracked,
    digest,
    marker_at,
    open_transcript,
    rewrite_reason,
)
from memoryd.ingest.parsers import RecordParser, parse_document, record_parser_for
from memoryd.ingest.parsers.common import ParsedMessage
from memoryd.private import mask_private, mask_private_line, may_hold_private
from memoryd.repository import gemini_project, project_root, working_tree
from memoryd.store.batches import Batch, CommitResult, FileState, MessageRow, NewSession
from memoryd.store.offsets import submit_batch
from memoryd.store.wal import Checkpointer

log = structlog.get_logger("memoryd.ingest")

_BOM = b"\xef\xbb\xbf"
_READ_SIZE = 256 * 1024
_DOCUMENT_HEAD = 512


class TurnOutcome(Enum):
    IDLE = "idle"  # nothing new, or only a partial line
    PROGRESS = "progress"  # committed something
    GONE = "gone"  # the path no longer exists
    RESCAN = "rescan"  # the path now names another file: identities must be resolved again


@dataclass(slots=True)
class TurnResult:
    outcome: TurnOutcome
    bytes_read: int = 0
    stored: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Prepared:
    """A turn read and parsed, its commit not yet made: `commit` stores it, and only then
    does `tracked` move on (a failed commit leaves it where it was)."""

    tracked: Tracked
    batch: Batch
    bytes_read: int
    # The document's change mark, remembered once its content is stored.
    document_mark: tuple[int, str] | None = None


#: A file's (device, inode, size, mtime_ns), packed: an idle daemon keeps one per followed
#: file, and a tuple of four ints is three times the size (2 MB for 10,000 files).
_SIGNATURE = struct.Struct("<QQQq")


def _signature(st: os.stat_result) -> bytes | None:
    """None when a value does not fit (no such file system yet): no idle shortcut."""
    try:
        return _SIGNATURE.pack(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except struct.error:
        return None


def _tail_mark(fd: int, size: int) -> tuple[int, str]:
    return size, marker_at(fd, size)


def _document_mark(fd: int, size: int) -> tuple[int, str]:
    """Whether a whole-document transcript may have changed, without reading all of it:
    Gemini rewrites `lastUpdated`, near the top, on every save."""
    head = os.pread(fd, _DOCUMENT_HEAD, 0)
    return size, digest(head + os.pread(fd, MARKER_BYTES, max(0, size - MARKER_BYTES)))


def _row(message: ParsedMessage, raw: bytes, offset: int) -> MessageRow:
    """A message to store, `<private>` spans masked in its text and its raw line (the key
    that recognises it when read again is the unmasked line's, as before)."""
    key = _dedupe_key(message.uuid, raw)
    # Only a `\\u` escape can spell the word in the decoded text but not in the line.
    decoded = b"\\u" in raw and ("private" in message.content.lower() or (
        message.tool_input is not None and "private" in message.tool_input.lower()))
    if not decoded and not may_hold_private(raw):
        return MessageRow(message, raw, offset, key)
    # The decoded text is masked whatever the raw line's own masking found: a tag written
    # with JSON's escapes, or split across a message's blocks, is still a tag.
    content, tool_input = message.content, message.tool_input
    message.content = mask_private(content)
    if tool_input is not None:
        message.tool_input = mask_private(tool_input)
    changed = message.content != content or message.tool_input != tool_input
    return MessageRow(message, mask_private_line(raw, changed), offset, key)


def _dedupe_key(uuid: str | None, raw: bytes) -> str:
    return uuid if uuid else "h:" + digest(raw)


class Tailer:
    def __init__(self, conn: aiosqlite.Connection, clock: Clock, read_chunk: int) -> None:
        self._conn = conn
        # Set by the ingester once it knows the database's file (see store.wal).
        self.checkpointer: Checkpointer | None = None
        self._clock = clock
        self._read_chunk = read_chunk
        self._parsers: dict[str, RecordParser] = {}
        # Paths that could not be read, with why: said once, not on every poll, and
        # said again only after they were readable in between.
        self._unreadable: dict[str, str] = {}

    def _parser(self, candidate: Candidate) -> RecordParser:
        parser = self._parsers.get(candidate.kind)
        if parser is None:
            parser = self._parsers[candidate.kind] = record_parser_for(candidate.kind)
        return parser

    async def turn(self, tracked: Tracked) -> TurnResult:
        """Read, parse and store what is new in one file."""
        prepared = self.prepare(tracked)
        if isinstance(prepared, TurnResult):
            return prepared
        return await self.finish(prepared, await self.submit(prepared))

    def prepare(self, tracked: Tracked) -> Prepared | TurnResult:
        """Read and parse what is new (synchronous: no other task runs meanwhile); a
        TurnResult when there is nothing to store."""
        if tracked.idle_stat is not None:
            try:
                st = os.stat(tracked.path)
            except FileNotFoundError:
                self._unreadable.pop(tracked.path, None)
                return TurnResult(TurnOutcome.GONE)
            except OSError:
                st = None
            if st is not None and _signature(st) == tracked.idle_stat:
                return TurnResult(TurnOutcome.IDLE)
            tracked.idle_stat = None
        try:
            fd, before = open_transcript(tracked.path)
        except FileNotFoundError:
            self._unreadable.pop(tracked.path, None)
            return TurnResult(TurnOutcome.GONE)
        except NotARegularFile:
            self._warn_once(tracked.path, "transcript_not_a_regular_file", None)
            return TurnResult(TurnOutcome.IDLE)
        except OSError as exc:
            self._warn_once(tracked.path, "transcript_unreadable", exc.strerror or str(exc))
            return TurnResult(TurnOutcome.IDLE)
        self._unreadable.pop(tracked.path, None)
        try:
            if tracked.candidate.mode is Mode.DOCUMENT:
                result = self._document_turn(tracked, fd, before)
            else:
                result = self._lines_turn(tracked, fd, before)
        finally:
            os.close(fd)
        # Trusted only for a file not modified in the last SETTLE_NS: within one tick of
        # a coarse mtime, a second write could leave size and mtime as they were.
        if (isinstance(result, TurnResult) and result.outcome is TurnOutcome.IDLE
                and time.time_ns() - before.st_mtime_ns > SETTLE_NS):
            tracked.idle_stat = _signature(before)
        return result

    async def submit(self, prepared: Prepared) -> asyncio.Task[CommitResult]:
        """Start storing `prepared` on the store's thread; `finish` awaits it. The file
        moves on when, and only if, the commit succeeds, whoever waits for it."""
        if self.checkpointer is not None:
            await self.checkpointer.keep_bounded(self._conn)
        commit = await submit_batch(self._conn, prepared.batch, self._clock.now())
        commit.add_done_callback(lambda task: self._stored(prepared, task))
        return commit

    async def finish(self, prepared: Prepared,
                     commit: asyncio.Task[CommitResult]) -> TurnResult:
        """Wait for the commit. Shielded: the transaction runs to its end on the store's
        thread anyway, and cancelling the wait must not lose what it stored."""
        result = await asyncio.shield(commit)
        self._stored(prepared, commit)
        return TurnResult(TurnOutcome.PROGRESS, bytes_read=prepared.bytes_read,
                          stored=result.stored)

    def _stored(self, prepared: Prepared, commit: asyncio.Task[CommitResult]) -> None:
        if commit.cancelled() or commit.exception() is not None:
            return
        if self.checkpointer is not None:
            self.checkpointer.committed(prepared.bytes_read)
        tracked = prepared.tracked
        tracked.state = prepared.batch.state
        tracked.verify = False
        if prepared.document_mark is not None:
            tracked.stalled = prepared.document_mark
        self._log_rejections(tracked, prepared.batch)

    def _warn_once(self, path: str, event: str, error: str | None) -> None:
        if self._unreadable.get(path) != event:
            self._unreadable[path] = event
            log.warning(event, path=path, error=error)

    # -- append-only JSONL -------------------------------------------------------------

    def _lines_turn(self, tracked: Tracked, fd: int,
                    st: os.stat_result) -> Prepared | TurnResult:
        # Work on a copy: the tracked state moves only once the commit has succeeded.
        state = dataclasses.replace(tracked.state) if tracked.state is not None else None
        if state is not None and (st.st_dev, st.st_ino) != (state.device, state.inode):
            if not tracked.verify:
                return TurnResult(TurnOutcome.RESCAN)
            state.device, state.inode = st.st_dev, st.st_ino
        if state is not None:
            self._check_rewrite(tracked, state, fd, st.st_size)
        offset = state.offset if state is not None else 0
        if st.st_size <= offset:
            return TurnResult(TurnOutcome.IDLE)
        if tracked.stalled is not None and tracked.stalled == _tail_mark(fd, st.st_size):
            return TurnResult(TurnOutcome.IDLE)

        framer = LineFramer(offset)
        lines: list[Line] = []
        position = offset
        read_size = min(_READ_SIZE, self._read_chunk)
        while True:
            # A turn reads about `read_chunk` bytes, so one large file cannot starve the
            # others; only a line longer than that makes it read on to the line's end.
            data = os.pread(fd, read_size, position)
            if not data:
                break
            position += len(data)
            lines.extend(framer.feed(data))
            if lines and position - offset >= self._read_chunk:
                break
        if not lines:
            tracked.stalled = _tail_mark(fd, st.st_size)
            return TurnResult(TurnOutcome.IDLE)
        tracked.stalled = None

        new_session = None
        if state is None:
            state = FileState(
                path=tracked.path, source=tracked.candidate.kind.value, device=st.st_dev,
                inode=st.st_ino, head_hash="", head_length=0,
            )
            new_session = NewSession(
                source=state.source, transcript_path=tracked.path,
                external_id=tracked.candidate.external_id,
                parent_external_id=tracked.candidate.parent_external_id,
            )
        if lines[0].offset == 0:
            # The identity: the whole first line, however long (new file, or read again).
            head = lines[0].data + b"\n"
            state.head_hash, state.head_length = digest(head), len(head)

        batch = Batch(state=state, new_session=new_session,
                      replaces_by_id=self._parser(tracked.candidate).replaces_by_id)
        self._parse_lines(tracked, lines, batch)
        if new_session is not None:
            # The file's own header (Codex session_meta, Gemini header) names the session;
            # later headers in the same file belong to replayed or forked history.
            new_session.external_id = batch.hints.get("external_id") or new_session.external_id
            new_session.parent_external_id = (batch.hints.get("parent_external_id")
                                              or new_session.parent_external_id)
            new_session.project = batch.hints.get("project") or self._project_of(tracked)
        end = framer.committed_end
        state.offset = end
        state.marker_hash = marker_at(fd, end)
        state.missing = False
        return Prepared(tracked, batch, end - offset)

    def _check_rewrite(self, tracked: Tracked, state: FileState, fd: int, size: int) -> None:
        """A file rewritten, or replaced by a new file at its path (identity.rewrite_reason),
        is read again from the start, matching what was already stored, so nothing is
        stored twice or deleted."""
        reason = rewrite_reason(tracked.verify, state, fd, size)
        if reason is None:
            return
        log.warning("transcript_rewritten", path=tracked.path, reason=reason,
                    previous_offset=state.offset, size=size)
        state.offset = 0
        state.marker_hash = ""
        state.dedupe = True
        state.rewrites += 1
        tracked.stalled = None

    def _parse_lines(self, tracked: Tracked, lines: list[Line], batch: Batch) -> None:
        parser = self._parser(tracked.candidate)
        for line in lines:
            data = line.data
            if data.endswith(b"\r"):
                data = data[:-1]
            if line.offset == 0 and data.startswith(_BOM):
                data = data[3:]
            # NUL padding (a preallocated or crash-damaged file) between records: the
            # next record starts after it, not inside a rejected line.
            data = data.strip(b"\x00")
            if not data.strip():
                continue
            batch.lines_read += 1
            try:
                record = orjson.loads(data)
            except orjson.JSONDecodeError:
                try:
                    # Decode what can be decoded: a stray invalid byte should not lose the
                    # line, nor a raw control character (a NUL) inside a string.
                    record = json.loads(data.decode("utf-8", "replace"), strict=False)
                except ValueError:
                    batch.rejected.append((line.offset, line.data, "not JSON"))
                    continue
            if not isinstance(record, dict):
                batch.rejected.append((line.offset, line.data, "JSON but not an object"))
                continue
            outcome = parser.parse(record)
            named, own = outcome.hints.get("external_id"), batch.hints.get("external_id")
            if named is not None and own is not None and named != own:
                # A header naming another session after the file's own (a Codex fork):
                # what follows is that session's conversation copied (`sessions.Copies`).
                batch.hints.setdefault("copied_from", named)
            for key, value in outcome.hints.items():
                batch.hints.setdefault(key, value)
            if outcome.summary is not None:
                batch.summaries.append((*outcome.summary, line.offset))
            if outcome.rewind_to is not None:
                batch.rewinds.append((outcome.rewind_to, line.offset))
            message = outcome.message
            if message is None:
                batch.lines_skipped += 1
                continue
            batch.messages.append(_row(message, line.data, line.offset))
        project = batch.hints.get("project")
        if project is not None:
            # One project a repository: its sub-directories and worktrees included; the
            # worktree itself is kept, so paths read relative to where the agent ran.
            batch.hints["project"] = project_root(project)
            tree = working_tree(project)
            if tree is not None:
                batch.hints["worktree"] = tree

    @staticmethod
    def _project_of(tracked: Tracked) -> str | None:
        """A project for a transcript whose records name none (Gemini CLI's)."""
        if tracked.candidate.kind is SourceKind.GEMINI:
            return gemini_project(tracked.path)
        return None

    def _log_rejections(self, tracked: Tracked, batch: Batch) -> None:
        if batch.rejected and not tracked.rejected_logged:
            tracked.rejected_logged = True
            offset, _raw, reason = batch.rejected[0]
            log.warning("lines_rejected", path=tracked.path, count=len(batch.rejected),
                        first_offset=offset, reason=reason)

    # -- whole documents (Gemini classic JSON) -----------------------------------------

    def _document_turn(self, tracked: Tracked, fd: int,
                       st: os.stat_result) -> Prepared | TurnResult:
        state = dataclasses.replace(tracked.state) if tracked.state is not None else None
        mark = _document_mark(fd, st.st_size)
        if tracked.stalled == mark:
            return TurnResult(TurnOutcome.IDLE)
        chunks = []
        position = 0
        while data := os.pread(fd, _READ_SIZE, position):
            chunks.append(data)
            position += len(data)
        data = b"".join(chunks)
        doc_hash = digest(data)
        if state is not None and state.marker_hash == doc_hash:
            tracked.stalled = mark
            return TurnResult(TurnOutcome.IDLE)
        try:
            document = parse_document(data)
        except ValueError as exc:
            # Most likely caught mid-rewrite; the next change brings a whole document.
            if not tracked.rejected_logged:
                tracked.rejected_logged = True
                log.warning("document_unreadable", path=tracked.path, error=str(exc))
            tracked.stalled = mark
            return TurnResult(TurnOutcome.IDLE)
        new_session = None
        if state is None:
            state = FileState(path=tracked.path, source=tracked.candidate.kind.value,
                              device=st.st_dev, inode=st.st_ino, head_hash=DOCUMENT,
                              head_length=0)
            new_session = NewSession(
                source=state.source, transcript_path=tracked.path,
                external_id=document.external_id or tracked.candidate.external_id,
                parent_external_id=tracked.candidate.parent_external_id,
                project=self._project_of(tracked),
            )
        state.device, state.inode = st.st_dev, st.st_ino
        state.offset = len(data)
        state.marker_hash = doc_hash
        state.missing = False
        batch = Batch(state=state, new_session=new_session, replaces_by_id=True)
        if document.summary:
            batch.summaries.append(("summary", document.summary, 0))
        for entry in document.entries:
            batch.lines_read += 1
            batch.messages.append(_row(entry.message, entry.raw, 0))
        return Prepared(tracked, batch, len(data), document_mark=mark)
