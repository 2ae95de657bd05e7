"""Files memoryd writes: replaced whole or not at all, and private directories.

One way to replace a file (`atomic_writer`, `atomic_write`): a temporary file
beside it, with an unpredictable name, created exclusively (a planted symlink is
never followed) and given its mode whatever the umask; written, fsynced, renamed
over the target, and the directory fsynced so the rename itself survives a
crash. On any error the temporary file is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal, overload

from memoryd.errors import ConfigError, StateDirError


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@overload
def atomic_writer(path: Path, *, mode: int = ..., text: Literal[True] = ...,
                  durable: bool = ...) -> contextlib.AbstractContextManager[IO[str]]: ...


@overload
def atomic_writer(path: Path, *, mode: int = ..., text: Literal[False],
                  durable: bool = ...) -> contextlib.AbstractContextManager[IO[bytes]]: ...


def atomic_writer(path: Path, *, mode: int = 0o600, text: bool = True,
                  durable: bool = True) -> contextlib.AbstractContextManager[IO[str] | IO[bytes]]:
    """A handle whose contents replace `path` when the block ends without an error.

    `durable=False` skips both fsyncs: for a file that is rewritten every second and
    whose loss in a crash costs nothing (the daemon's status snapshot)."""
    return _atomic_writer(path, mode, text, durable)


@contextlib.contextmanager
def _atomic_writer(path: Path, mode: int, text: bool,
                   durable: bool) -> Iterator[IO[str] | IO[bytes]]:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        handle: IO[str] | IO[bytes]
        handle = os.fdopen(fd, "w", encoding="utf-8") if text else os.fdopen(fd, "wb")
        with handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o600,
                 durable: bool = True) -> None:
    """Replace `path` by `data` (see `atomic_writer`)."""
    if isinstance(data, str):
        with atomic_writer(path, mode=mode, durable=durable) as handle:
            handle.write(data)
    else:
        with atomic_writer(path, mode=mode, text=False, durable=durable) as raw:
            raw.write(data)


def make_dirs(path: Path) -> None:
    """`path` and every missing parent created 0700, whatever the umask (`mkdir`'s
    `parents` would make the parents 0777 under umask 000); existing ones untouched."""
    missing: list[Path] = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue
        directory.chmod(0o700)  # mkdir's mode is narrowed by the umask, never widened


def ensure_writable_dir(path: Path) -> None:
    """An existing directory memoryd must write in: refused with one sentence when it
    cannot (root passes permission bits, so a read-only mount is asked of the kernel)."""
    if not path.is_dir() or os.access(path, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    why = "is on a read-only file system" if read_only else "is not writable by this user"
    raise StateDirError(str(path), f"{why}; memoryd keeps its databases there: make it"
                                   " writable, or set state_dir to a directory that is")


def ensure_private_dir(path: Path, setting: str = "state_dir") -> None:
    """`path` as a directory for memoryd's files: created 0700 when missing.

    An existing directory is never chmodded (a state_dir pointed at /tmp or at
    the current directory would otherwise lose its sticky bit or its mode). One
    that another user owns, or that others may write to, is refused: anyone
    who can write there can replace memoryd's databases or socket.
    """
    existed = path.exists()
    try:
        make_dirs(path)
    except OSError as exc:
        raise StateDirError(str(path), exc.strerror or str(exc)) from None
    if not existed and path.is_dir():
        return
    try:
        info = path.stat()
    except OSError as exc:
        raise StateDirError(str(path), exc.strerror or str(exc)) from None
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(str(path), "exists and is not a directory")
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.geteuid():
        raise ConfigError(setting, f"{path} belongs to another user (uid {info.st_uid});"
                                   " use a directory of your own")
    if mode & 0o022:
        raise ConfigError(setting, f"{path} is writable by others (mode {mode:o}); memoryd"
                                   " keeps its state only in a directory of its own (a new"
                                   " path is created 0700)")
    ensure_writable_dir(path)
