"""Where memoryd looks by default: its state directory and its config file.

Standard library only: the hook and the quick command path use it too.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def expanded(value: str) -> Path:
    """A path from a setting: `$VARS` and `~` expanded."""
    return Path(os.path.expandvars(value)).expanduser()


def default_state_dir() -> Path:
    if sys.platform == "darwin":
        return Path("~/Library/Application Support/memoryd").expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path("~/.local/share").expanduser()) / "memoryd"


def default_config_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path("~/.config").expanduser()
    return base / "memoryd" / "config.yaml"


#: A config file larger than this is refused: settings are a few kilobytes, and reading
#: a path named by mistake (`--config /dev/zero`) must end.
MAX_CONFIG_BYTES = 1 << 20


def read_config_file(path: str | os.PathLike[str]) -> str:
    """The config file's text; ValueError (UnicodeDecodeError for bad bytes) when it is not
    a regular file or is larger than MAX_CONFIG_BYTES, OSError when it cannot be read.
    Opened without blocking: a FIFO named by mistake must not hang the command."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"larger than {MAX_CONFIG_BYTES // 1024} KiB: not a settings file")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


#: Where the full command line notes the config file it last found valid: the quick path
#: (`cli.quick`, no pydantic) answers only for a file that is, byte for byte, that one.
CONFIG_CHECKED = ".config-checked"


def _config_digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def config_checked(text: str, state_dir: str | os.PathLike[str]) -> bool:
    """Whether this config file's `text` is the one a full command last found valid."""
    try:
        noted = Path(state_dir, CONFIG_CHECKED).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return noted == _config_digest(text)


def note_config_checked(text: str, state_dir: str | os.PathLike[str]) -> None:
    """Note `text` as valid for the quick path: only in a state directory that exists and
    is this user's own and private (never one that memoryd would refuse), 0600."""
    directory = Path(state_dir)
    try:
        info = directory.stat()
    except OSError:
        return
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
            or info.st_mode & 0o077):
        return
    target = directory / CONFIG_CHECKED
    temporary = directory / (CONFIG_CHECKED + f".{os.getpid()}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(_config_digest(text) + "\n")
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)
