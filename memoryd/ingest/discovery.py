"""Finding transcript files under each source's root, and what their paths tell."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

import structlog

from memoryd.config import SourceConfig, SourceKind

log = structlog.get_logger("memoryd.ingest")

_CODEX_ID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$", re.I)


class Mode(StrEnum):
    LINES = "lines"  # append-only JSONL, followed by offset
    DOCUMENT = "document"  # one JSON document rewritten whole (Gemini classic)


@dataclass(frozen=True, slots=True)
class Candidate:
    path: str
    kind: SourceKind
    mode: Mode
    external_id: str | None
    parent_external_id: str | None = None


def _parts_under(path: str, root: str) -> tuple[str, ...] | None:
    """`path`'s parts below `root` as pathlib reads them (None when it is not below it),
    without a Path for the usual normal form: pathlib interns every part it parses, and
    Python's table of interned strings stays the size of its fullest (2 MB once 10,000
    transcripts' names had passed through it)."""
    if "//" in path or "/./" in path or path.endswith(("/", "/.")):
        try:  # not in the normal form a walk or a notification gives: as pathlib reads it
            return Path(path).relative_to(root).parts
        except ValueError:
            return None
    if path == root:
        return ()
    prefix = root if root.endswith("/") else root + "/"
    if not path.startswith(prefix):
        return None
    return tuple(path[len(prefix):].split("/"))


@lru_cache(maxsize=16)
def _root_names(root: str) -> tuple[str, str]:
    """The names of a root's folder and of the root (pathlib's `parent.name`, `name`)."""
    return Path(root).parent.name, Path(root).name


def _stem_and_suffix(name: str) -> tuple[str, str]:
    """pathlib's `stem` and `suffix` of a final component."""
    at = name.rfind(".")
    if 0 < at < len(name) - 1:
        return name[:at], name[at:]
    return name, ""


def classify(path: str, source: SourceConfig) -> Candidate | None:
    """The candidate for `path` under `source`'s root, or None when it is not a transcript."""
    root = str(source.root)
    parts = _parts_under(path, root)
    if parts is None:
        return None
    names = (*_root_names(root), *parts)  # the last two: the file's and its folder's
    name = names[-1]
    stem, suffix = _stem_and_suffix(name)
    if source.kind is SourceKind.CLAUDE:
        if suffix != ".jsonl" or name == "journal.jsonl":
            return None
        if "subagents" in parts[:-1]:
            at = parts.index("subagents")
            parent = parts[at - 1] if at >= 1 else None
            return Candidate(path, source.kind, Mode.LINES, stem, parent)
        return Candidate(path, source.kind, Mode.LINES, stem)
    if source.kind is SourceKind.CODEX:
        if not (name.startswith("rollout-") and suffix == ".jsonl"):
            return None
        match = _CODEX_ID.search(stem)
        return Candidate(path, source.kind, Mode.LINES, match.group(1) if match else stem)
    if names[-2] != "chats":
        if len(names) >= 3 and names[-3] == "chats" and suffix in (".json", ".jsonl"):
            # Gemini CLI 0.3x+: a subagent's chat, `chats/<parent session id>/<agent>.json`
            # (the parent's session id is the id memoryd knows its chat by).
            mode = Mode.DOCUMENT if suffix == ".json" else Mode.LINES
            return Candidate(path, source.kind, mode, stem, names[-2])
        return None
    if suffix == ".json":
        return Candidate(path, source.kind, Mode.DOCUMENT, stem)
    if suffix == ".jsonl":
        return Candidate(path, source.kind, Mode.LINES, stem)
    return None


UNREADABLE = -2  # an mtime that no directory has: `discover` could not list it


def _walk(root: Path, directories: dict[str, int] | None) -> Iterator[str]:
    """Transcript-looking paths under `root`; each directory's mtime into `directories`."""
    real_root = os.path.realpath(root)
    pending = [str(root)]
    while pending:
        directory = pending.pop()
        try:
            if directories is not None:
                directories[directory] = os.stat(directory).st_mtime_ns
            entries = list(os.scandir(directory))
        except OSError:
            if directories is not None and directory in directories:
                directories[directory] = UNREADABLE  # its mtime still says when it changes
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                    continue
                if not entry.name.endswith((".jsonl", ".json")):
                    continue
                # A symlink is followed only to a file inside the same root: one planted
                # towards /etc/passwd would otherwise copy it into the store.
                if entry.is_symlink() and not _inside(os.path.realpath(entry.path), real_root):
                    log.debug("transcript_symlink_outside_root", path=entry.path)
                    continue
            except OSError:
                continue
            yield entry.path


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def discover(sources: Iterable[SourceConfig],
             directories: dict[str, int] | None = None) -> Iterator[Candidate]:
    """Every transcript under the enabled sources' roots that exist, in a stable order.

    `directories`, when given, receives every directory walked with its mtime (ns),
    and each root that does not exist with -1: what `unchanged` compares later.
    """
    for source in sources:
        if not source.enabled:
            continue
        if not source.root.is_dir():
            if directories is not None:
                directories[str(source.root)] = -1
            continue
        for path in sorted(_walk(source.root, directories)):
            candidate = classify(path, source)
            if candidate is not None:
                yield candidate


def unchanged(directories: dict[str, int], now_ns: int, settle_ns: int) -> bool:
    """Whether no directory walked by `discover` has gained, lost or renamed an entry.

    A directory's mtime moves whenever an entry is added, removed or renamed in it.
    One modified within `settle_ns` of now counts as changed: on a file system with
    coarse timestamps a second change in the same tick would not move it again.
    """
    for directory, mtime in directories.items():
        try:
            current = os.stat(directory).st_mtime_ns
        except OSError:
            current = -1
        if mtime == UNREADABLE:
            if not os.access(directory, os.R_OK | os.X_OK):
                continue
            return False  # readable again
        if current != mtime or (current >= 0 and now_ns - current < settle_ns):
            return False
    return True


def classify_any(path: str, sources: Iterable[SourceConfig]) -> Candidate | None:
    for source in sources:
        if source.enabled:
            candidate = classify(path, source)
            if candidate is not None:
                return candidate
    return None


def classify_explicit(path: str, kind: SourceKind) -> Candidate | None:
    """The candidate for a transcript an agent named itself, wherever it lies."""
    return classify(path, SourceConfig(kind=kind, root=Path(path).parent.parent))


#: Why a hook's transcript is not read yet: the agent has not written it.
NOT_THERE_YET = "not there (yet)"


def admit_transcript(path: str, roots: Iterable[str]) -> str | None:
    """Why a transcript path a hook named may not be read, or None when it may.

    A hook's payload names its transcript; what lies at that path is read, stored
    and given back to agents, so it must be an agent's transcript and nothing else:
    the path, resolved through every symlink, lies inside one of `roots` (the
    configured roots, the agent's own transcript directory), is a regular file and
    belongs to this process's user. The directory walk never follows a symlink out
    of a root; this is the same rule for the paths hooks name.
    """
    if "\x00" in path or not os.path.isabs(path):
        return "not an absolute path"
    try:
        resolved = os.path.realpath(path, strict=True)
        found = os.stat(resolved)
    except (OSError, ValueError):
        return NOT_THERE_YET
    if not stat.S_ISREG(found.st_mode):
        return "not a regular file"
    if found.st_uid != os.geteuid():
        return "owned by another user"
    for root in roots:
        try:
            real_root = os.path.realpath(root, strict=True)
        except (OSError, ValueError):
            continue
        if _inside(resolved, real_root):
            return None
    return "outside the agents' transcript directories"
