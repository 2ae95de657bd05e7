"""One parser per agent's transcript format."""

from __future__ import annotations

from memoryd.config import SourceKind
from memoryd.ingest.parsers.base import ParsedMessage, RecordOutcome, RecordParser
from memoryd.ingest.parsers.claude import ClaudeParser
from memoryd.ingest.parsers.codex import CodexParser
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
