"""Plain values passed between the tailer and the store."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ParsedMessage:
    """One message as a parser read it from a transcript record (what the store keeps)."""

    role: str  # user | assistant | system | tool
    content: str
    # message | injected | tool_call | tool_result | thinking | compact_summary |
    # compact_boundary | compacted
    kind: str = "message"
    tool_name: str | None = None
    tool_input: str | None = None  # JSON text
    uuid: str | None = None
    timestamp: str | None = None  # ISO-8601 UTC
    is_sidechain: bool = False


@dataclass(slots=True)
class FileState:
    """One row of `session_message_state`: how far a transcript file has been stored."""

    path: str
    source: str
    device: int
    inode: int
    head_hash: str
    head_length: int
    session_id: int = 0  # 0 until the file's first batch creates its session
    offset: int = 0
    last_message_index: int = -1
    marker_hash: str = ""
    dedupe: bool = False  # after a rewrite: match messages already stored before inserting
    rewrites: int = 0
    missing: bool = False

    @property
    def fingerprint(self) -> str:
        return f"{self.device}:{self.inode}:{self.head_hash}:{self.head_length}"


@dataclass(slots=True)
class NewSession:
    source: str
    transcript_path: str
    external_id: str | None
    parent_external_id: str | None = None
    project: str | None = None


@dataclass(slots=True)
class MessageRow:
    message: ParsedMessage
    raw: bytes
    byte_offset: int
    dedupe_key: str


@dataclass(slots=True)
class Batch:
    """Everything one read of one file produced; committed in one transaction."""

    state: FileState
    new_session: NewSession | None = None
    messages: list[MessageRow] = field(default_factory=list)
    summaries: list[tuple[str, str, int]] = field(default_factory=list)  # kind, text, offset
    rewinds: list[tuple[str, int]] = field(default_factory=list)  # message uuid, line offset
    rejected: list[tuple[int, bytes, str]] = field(default_factory=list)  # offset, raw, reason
    hints: dict[str, str] = field(default_factory=dict)
    lines_read: int = 0
    lines_skipped: int = 0
    replaces_by_id: bool = False


@dataclass(slots=True)
class CommitResult:
    session_id: int
    stored: int
    updated: int
    duplicates: int
