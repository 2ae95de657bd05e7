"""Finding transcript files under each source's root, and what their paths tell."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from daemon.config import SourceConfig, SourceKind

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


def classify(path: str, source: SourceConfig) -> Candidate | None:
    """The candidate for `path` under `source`'s root, or None when it is not a transcript."""
    p = Path(path)
    try:
        relative = p.relative_to(source.root)
    except ValueError:
        return None
    name = p.name
    if source.kind is SourceKind.CLAUDE:
        if p.suffix != ".jsonl" or name == "journal.jsonl":
            return None
        parts = relative.parts
        if "subagents" in parts[:-1]:
            at = parts.index("subagents")
            parent = parts[at - 1] if at >= 1 else None
            return Candidate(path, source.kind, Mode.LINES, p.stem, parent)
        return Candidate(path, source.kind, Mode.LINES, p.stem)
    if source.kind is SourceKind.CODEX:
        if not (name.startswith("rollout-") and p.suffix == ".jsonl"):
            return None
        match = _CODEX_ID.search(p.stem)
        return Candidate(path, source.kind, Mode.LINES, match.group(1) if match else p.stem)
    if p.parent.name != "chats":
        return None
    if p.suffix == ".json":
        return Candidate(path, source.kind, Mode.DOCUMENT, p.stem)
    if p.suffix == ".jsonl":
        return Candidate(path, source.kind, Mode.LINES, p.stem)
    return None


def _walk(root: Path) -> Iterator[str]:
    for directory, _dirs, files in os.walk(root, onerror=None, followlinks=False):
        for name in files:
            if name.endswith((".jsonl", ".json")):
                yield os.path.join(directory, name)


def discover(sources: Iterable[SourceConfig]) -> Iterator[Candidate]:
    """Every transcript under the enabled sources' roots that exist, in a stable order."""
    for source in sources:
        if not source.enabled or not source.root.is_dir():
            continue
        for path in sorted(_walk(source.root)):
            candidate = classify(path, source)
            if candidate is not None:
                yield candidate


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
