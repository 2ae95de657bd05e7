"""One parser per agent's transcript format.

    common.py   what every parser returns (`ParsedMessage`, `RecordOutcome`), the
                `RecordParser` protocol, and the helpers they share
    claude.py   Claude Code: `~/.claude/projects/<project>/<session>.jsonl`
    codex.py    Codex CLI rollouts: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`
    gemini.py   Gemini CLI chats: `session-*.json` documents and `.jsonl` files

`record_parser_for` gives the parser of a source's kind; `tool_reader_for` what its
lines say of its tools (the digest reads them).
"""

from __future__ import annotations

from memoryd.config import SourceKind
from memoryd.ingest.parsers import claude, codex, gemini
from memoryd.ingest.parsers.claude import ClaudeParser
from memoryd.ingest.parsers.codex import CodexParser
from memoryd.ingest.parsers.common import (
    ParsedMessage,
    RecordOutcome,
    RecordParser,
    ToolOutcome,
    ToolReader,
    ToolUse,
    no_branch,
    no_outcomes,
    no_uses,
)
from memoryd.ingest.parsers.gemini import GeminiRecordParser, parse_document

__all__ = [
    "ClaudeParser",
    "CodexParser",
    "GeminiRecordParser",
    "ParsedMessage",
    "RecordOutcome",
    "RecordParser",
    "ToolOutcome",
    "ToolReader",
    "ToolUse",
    "parse_document",
    "record_parser_for",
    "tool_reader_for",
]

#: Each agent's reader of its tools; another source's lines say nothing more.
_TOOL_READERS = {SourceKind.CLAUDE.value: claude.TOOLS, SourceKind.CODEX.value: codex.TOOLS,
                 SourceKind.GEMINI.value: gemini.TOOLS}
_NO_TOOLS = ToolReader(uses=no_uses, outcomes=no_outcomes, branch=no_branch)


def record_parser_for(kind: SourceKind) -> RecordParser:
    if kind is SourceKind.CLAUDE:
        return ClaudeParser()
    if kind is SourceKind.CODEX:
        return CodexParser()
    return GeminiRecordParser()


def tool_reader_for(source: str) -> ToolReader:
    return _TOOL_READERS.get(source, _NO_TOOLS)
