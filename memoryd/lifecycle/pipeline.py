"""Recovery's two stages, overlapped: the next page of messages read on the store's
thread while this one is cut, and a batch's memories written while the next is prepared.

`Candidates` reads the sessions to save a page at a time, `PageReader` reads a session's
messages ahead, `Saving` keeps each session's batches in order (`Recovery` drives them).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import aiosqlite

from memoryd.lifecycle.segments import new_copies
from memoryd.store import sessions as store
from memoryd.store.copies import Copies
from memoryd.store.sessions import SessionSyncState


class Saving:
    """The batches being saved while recovery prepares the next.

    Preparing a batch (cutting, rendering, masking) is Python on the event loop's
    thread; saving it is SQLite on the stores' threads, mostly outside Python's lock.
    A batch's memories are written while the next is prepared, and its index moves (on
    the session store's thread) while the next one's memories are written. Each
    session's batches stay in order: a batch's memories are written once the one
    before it has written its own, and its index moves once that one's has moved."""

    def __init__(self) -> None:
        #: The batches not finished (with their session), oldest first: at most the one
        #: moving its index and the one writing its memories.
        self._tasks: list[tuple[asyncio.Task[bool], int]] = []
        #: The newest batch and whether it wrote its memories, once it knows (False: it
        #: stopped before).
        self._newest: tuple[asyncio.Task[bool], asyncio.Future[bool]] | None = None
        self._session: int | None = None
        self.touched: set[int] = set()

    async def start(self, session_id: int,
                    saving: Callable[[Turn], Coroutine[Any, Any, bool]]) -> None:
        """Start `saving(turn)`; it sets `turn.written` once its memories are written and
        awaits `turn.before` (the batch before it, None if none) before moving its index."""
        turn = Turn(asyncio.get_running_loop().create_future(),
                     self._tasks[-1][0] if self._tasks else None, self._session == session_id)
        task = asyncio.ensure_future(saving(turn))
        self._session, self._newest = session_id, (task, turn.written)
        self._tasks.append((task, session_id))
        # Let it run up to handing its statements to the store's thread, so that they run
        # while the caller prepares the next batch.
        await asyncio.sleep(0)

    async def hand_over(self, session_id: int) -> bool:
        """Wait until the newest batch has written its memories and the one before it has
        moved its index; False if either was `session_id`'s and stopped there (its later
        batches must not be saved past a gap)."""
        newest, self._newest = self._newest, None
        if newest is None:
            return True
        task, written = newest
        if not await written:
            # It has stopped: its error, if it failed other than as a backend does, is
            # the pass's (raised here, not at the end of the pass).
            await task
            return self._session != session_id
        # Those before it have moved their index (two batches in flight at most), or one
        # stopped (another sync moved its index): then so does this session.
        for earlier, session in self._tasks[:-1]:
            if not await earlier and session == session_id:
                return False
        del self._tasks[:-1]
        return True

    async def settle(self) -> None:
        """Until every batch in flight is saved and its index moved (or has stopped its
        session)."""
        tasks, self._tasks, self._newest = self._tasks, [], None
        for task, _session in tasks:
            await task

    async def abandon(self) -> None:
        """On the way out of a failed pass: the batches in flight are not waited for
        (their threads' work ends by itself; an unmoved index saves them again, once),
        and their own errors, if any, are not raised over the first one."""
        tasks, self._tasks, self._newest = self._tasks, [], None
        for task, _session in tasks:
            task.cancel()
        for task, _session in tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task


@dataclass(slots=True)
class Turn:
    """A batch's place in `Saving`'s order."""

    #: Set by the batch: True once its memories are written, False if it stopped before.
    written: asyncio.Future[bool]
    #: The batch before it, whose index must move first (its answer: whether it did).
    before: asyncio.Task[bool] | None
    #: Whether that one is of the same session (a stop there stops this one too).
    same_session: bool

    def wrote(self, ok: bool) -> None:
        if not self.written.done():
            self.written.set_result(ok)


PageKey = tuple[int, int, bool]  # session, first message index, with the digest's lines


class PageReader:
    """Pages of messages read on the store's thread while the event loop's thread cuts
    and saves the page before: the next page of a session, and at a session's last page
    the first page of the session after it (most sessions are a page or two)."""

    def __init__(self, conn: aiosqlite.Connection, copies: dict[int, Copies] | None,
                 page: int) -> None:
        self._conn = conn
        self._page = page
        #: Each session's `Copies`, from page to page (and pass to pass).
        self._copies = {} if copies is None else copies
        self._ahead: dict[PageKey, asyncio.Future[list[store.StoredMessage]]] = {}
        #: The first page the pass will read after the current session's last, if any.
        self.next_up: PageKey | None = None

    def read(self, session_id: int, start: int, raw: bool,
             ) -> asyncio.Future[list[store.StoredMessage]]:
        """The page of `session_id` from `start` on: the one read ahead, or read now."""
        found = self._ahead.pop((session_id, start, raw), None)
        if found is not None:
            return found
        copies = self._copies.setdefault(session_id, new_copies())
        return asyncio.ensure_future(
            store.messages_from(self._conn, session_id, start, self._page, raw=raw,
                                copies=copies))

    def read_next_up(self) -> None:
        """Start reading the next session's first page (it is used, or cancelled by
        `close`)."""
        key, self.next_up = self.next_up, None
        if key is not None and key not in self._ahead:
            self._ahead[key] = self.read(*key)

    async def close(self) -> None:
        ahead, self._ahead = list(self._ahead.values()), {}
        for page in ahead:
            page.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await page


class Candidates:
    """The sessions a pass saves, oldest first, read a page at a time, and those read
    already that come next (where the pass looks ahead for the page to read next)."""

    def __init__(self, conn: aiosqlite.Connection, session_id: int | None, page: int) -> None:
        self._conn = conn
        self._page = page
        self._session_id = session_id
        self.waiting: deque[SessionSyncState] = deque()
        self._after = 0
        self._more = True

    async def next(self) -> SessionSyncState | None:
        if len(self.waiting) < 2 and self._more:
            page = await store.sessions_to_sync(self._conn, self._session_id,
                                                after=self._after, limit=self._page)
            self._more = self._session_id is None and len(page) == self._page
            if page:
                self._after = page[-1].id
            self.waiting.extend(page)
        return self.waiting.popleft() if self.waiting else None
