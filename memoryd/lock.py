"""One daemon per state directory: an exclusive flock on `<state_dir>/memoryd.lock`."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.errors import AlreadyRunningError
from memoryd.files import ensure_private_dir, make_dirs

if TYPE_CHECKING:
    from memoryd.config import Settings


@dataclass(frozen=True, slots=True)
class LockInfo:
    pid: int
    started_at: str
    command: str


class StateLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, command: str, started_at: datetime) -> None:
        make_dirs(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_lock_info(self.path)
            pid = holder.pid if holder else None
            raise AlreadyRunningError(str(self.path.parent), pid) from None
        payload = {"pid": os.getpid(), "started_at": started_at.isoformat(), "command": command}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(payload).encode(), 0)
        except OSError as exc:  # a full disk: said with the file it happened to
            os.close(fd)
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def read_lock_info(path: Path) -> LockInfo | None:
    """Who holds the lock, or None when nobody does."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: someone is running
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        raw = os.pread(fd, 4096, 0)
    finally:
        os.close(fd)
    try:
        data: dict[str, Any] = json.loads(raw or b"{}")
    except ValueError:
        data = {}
    return LockInfo(int(data.get("pid", 0)), str(data.get("started_at", "")),
                    str(data.get("command", "")))


@contextlib.contextmanager
def hold_lock(settings: Settings, command: str, now: datetime) -> Iterator[StateLock]:
    """The state directory's lock: raises AlreadyRunningError when another memoryd holds it."""
    ensure_private_dir(settings.state_dir)
    lock = StateLock(settings.lock_path)
    lock.acquire(command, now)
    try:
        yield lock
    finally:
        lock.release()
