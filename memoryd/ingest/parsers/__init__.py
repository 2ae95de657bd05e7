"""One parser per agent's transcript format.

    common.py   what every parser returns (`ParsedMessage`, `RecordOutcome`), the
                `RecordParser` protocol, and the helpers they share
    claude.py   Claude Code: `~/.claude/projects/<project>/<session>.jsonl`
    codex.py    Codex CLI rollouts: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`
    gemini.py   Gemini CLI chats: `session-*.json` documents and `.jsonl` files

`record_parser_for` gives the parser of a source's kind.
"""

from __future__ import annotations

from memoryd.config import SourceKind
from memoryd.ingest.parsers.claude import ClaudeParser
from memoryd.ingest.parsers.codex import CodexParser
from memoryd.ingest.parsers.common import ParsedMessage, RecordOutcome, RecordParser
from memoryd.ingest.parsers.gemini import GeminiRecordParser, parse_document

__all__ = [
    "ClaudeParser",
    "CodexParser",
    "GeminiRecordParser",
    "ParsedMessage",
    "RecordOutcome",
    "RecordParser",
    "parse_document",
    "record_parser_for",
]


def record_parser_for(kind: SourceKind) -> RecordParser:
    if kind is SourceKind.CLAUDE:
        return ClaudeParser()
    if kind is SourceKind.CODEX:
        return CodexParser()
    return GeminiRecordParser()
