"""One parser per agent's transcript format."""

from __future__ import annotations

from daemon.config import SourceKind
from daemon.ingest.parsers.base import ParsedMessage, RecordOutcome, RecordParser
from daemon.ingest.parsers.claude import ClaudeParser
from daemon.ingest.parsers.codex import CodexParser
from daemon.ingest.parsers.gemini import GeminiRecordParser, parse_document

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
