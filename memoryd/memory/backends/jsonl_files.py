"""The JSONL backend's files: one a project, named from it; events appended as whole
lines, fsynced; a line cut short by a crash skipped or cut; a hard forget's rewrite."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from memoryd.files import atomic_write

log = structlog.get_logger("memoryd.memory.jsonl")

NO_PROJECT = "_no_project.jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(project: str | None) -> str:
    if project is None:
        return NO_PROJECT
    slug = _UNSAFE.sub("-", project).strip("-.")[-60:] or "project"
    return f"{slug}-{hashlib.sha256(project.encode()).hexdigest()[:8]}.jsonl"


def read_events(path: Path) -> Iterable[dict[str, Any]]:
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.endswith(b"\n"):
                log.warning("jsonl_partial_line_skipped", path=str(path), line=number)
                continue
            try:
                event = json.loads(line)
            except ValueError:
                log.warning("jsonl_bad_line_skipped", path=str(path), line=number)
                continue
            if isinstance(event, dict):
                yield event


def append_events(directory: Path, name: str, events: Sequence[Mapping[str, Any]]) -> None:
    data = b"".join(json.dumps(e, sort_keys=True, ensure_ascii=False).encode() + b"\n"
                    for e in events)
    fd = os.open(directory / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            # A full disk mid-line: cut what was written, or the next append would be
            # glued onto it and lost with it.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def rewrite_without(directory: Path, name: str, ids: set[str]) -> None:
    """The file again, without the `add` lines of `ids` (a hard forget)."""
    path = directory / name
    if not path.exists():
        return
    kept = [line for line in path.read_bytes().splitlines(keepends=True)
            if not (line.endswith(b"\n") and _adds_one_of(line, ids))]
    atomic_write(path, b"".join(kept))


def cut_partial_tail(path: Path) -> None:
    """Drop a last line cut short by a crash (never acknowledged), so the next append
    starts on a line of its own instead of gluing onto it."""
    size = path.stat().st_size
    if size == 0:
        return
    with path.open("r+b") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        data = handle.read()
        keep = data.rfind(b"\n") + 1
        log.warning("jsonl_partial_line_dropped", path=str(path), bytes=size - keep)
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())


def _adds_one_of(line: bytes, ids: set[str]) -> bool:
    try:
        event = json.loads(line)
    except ValueError:
        return False
    return (isinstance(event, dict) and event.get("op") == "add"
            and isinstance(event.get("record"), dict) and event["record"].get("id") in ids)
