"""`classify` reads a transcript's path with string operations (pathlib interns every
part it parses, and 10,000 names kept Python's table of interned strings at 2 MB for the
daemon's life): whatever the path, it must answer exactly what reading it with pathlib
did, for every agent's layout."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memoryd.config import SourceConfig, SourceKind
from memoryd.ingest.discovery import _CODEX_ID, Candidate, Mode, classify


def _with_pathlib(path: str, source: SourceConfig) -> Candidate | None:
    """classify as written before, on a Path."""
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
        if p.parent.parent.name == "chats" and p.suffix in (".json", ".jsonl") and len(
                (*Path(source.root).parent.parts[-1:], *Path(source.root).parts[-1:],
                 *relative.parts)) >= 3:
            mode = Mode.DOCUMENT if p.suffix == ".json" else Mode.LINES
            return Candidate(path, source.kind, mode, p.stem, p.parent.name)
        return None
    if p.suffix == ".json":
        return Candidate(path, source.kind, Mode.DOCUMENT, p.stem)
    if p.suffix == ".jsonl":
        return Candidate(path, source.kind, Mode.LINES, p.stem)
    return None


ROOTS = ["/", "/home/u/.claude/projects", "/home/u/.codex/sessions", "/home/u/.gemini/tmp",
         "/r", "/r.jsonl", "/srv/chats"]
_NAMES = st.sampled_from([
    "", ".", "..", "chats", "subagents", "journal.jsonl", "a.jsonl", ".jsonl", "a.", "a.b.json",
    "x.json", "rollout-2025-01-01T00-00-00-0e6f1234-1234-4abc-9def-0123456789ab.jsonl",
    "rollout-.jsonl", "rollout-x", "r", "u", "home", ".claude", "projects", "-home-u-p",
    "0e6f1234-1234-4abc-9def-0123456789ab.jsonl", "tmp", "sessions", ".codex", ".gemini",
]) | st.text(alphabet="ab.-_/", max_size=8)


@st.composite
def _paths(draw: st.DrawFn) -> str:
    """Paths below a root, beside one, or anywhere, with the odd `//`, `/./`, `..` and
    trailing separator that only hand-written paths carry."""
    head = draw(st.sampled_from([*ROOTS, "", ".", "/home/u", "/r2"]))
    parts = draw(st.lists(_NAMES, max_size=5))
    sep = draw(st.sampled_from(["/", "/", "/", "//", "/./"]))
    path = head + "".join(sep + part if i or head else part for i, part in enumerate(parts))
    return path + draw(st.sampled_from(["", "", "", "/", "/."]))


@settings(max_examples=3000, deadline=None)
@given(path=_paths(), root=st.sampled_from(ROOTS), kind=st.sampled_from(list(SourceKind)))
@example(path="/home/u/.claude/projects/-home-u-p/s.jsonl", root=ROOTS[1],
         kind=SourceKind.CLAUDE)
@example(path="/home/u/.claude/projects/p/s/subagents/agent-1.jsonl", root=ROOTS[1],
         kind=SourceKind.CLAUDE)
@example(path="/home/u/.gemini/tmp/h/chats/session-1.json", root=ROOTS[3],
         kind=SourceKind.GEMINI)
@example(path="/srv/chats/a.jsonl", root="/srv/chats", kind=SourceKind.GEMINI)
@example(path="/home/u/.gemini/tmp/h/chats/b1f31681-4b57/tl63m8.json", root=ROOTS[3],
         kind=SourceKind.GEMINI)
@example(path="/srv/chats", root="/srv/chats", kind=SourceKind.GEMINI)
@example(path="/r.jsonl", root="/r.jsonl", kind=SourceKind.CLAUDE)
def test_classify_reads_a_path_as_pathlib_did(path: str, root: str, kind: SourceKind) -> None:
    source = SourceConfig(kind=kind, root=Path(root))
    assert classify(path, source) == _with_pathlib(path, source)
