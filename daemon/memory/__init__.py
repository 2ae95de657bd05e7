"""Memory backends: the protocol every store implements, its values, the embedded SQLite store."""

from daemon.memory.models import (
    DECAYING_TYPES,
    DEFAULT_IMPORTANCE,
    ConversationSegment,
    DeletionMode,
    DeletionRecord,
    Memory,
    MemoryType,
    Provenance,
    RecallResult,
    RequestedMemory,
    SaveResult,
    SessionSummary,
    new_memory_id,
    requested_memory_id,
    segment_id,
    summary_id,
)
from daemon.memory.protocol import MemoryBackend, RecallOrder
from daemon.memory.records import SCHEMA_VERSION, memory_to_record, record_to_memory
from daemon.memory.sqlite import SQLiteMemoryBackend

__all__ = [
    "DECAYING_TYPES",
    "DEFAULT_IMPORTANCE",
    "SCHEMA_VERSION",
    "ConversationSegment",
    "DeletionMode",
    "DeletionRecord",
    "Memory",
    "MemoryBackend",
    "MemoryType",
    "Provenance",
    "RecallOrder",
    "RecallResult",
    "RequestedMemory",
    "SQLiteMemoryBackend",
    "SaveResult",
    "SessionSummary",
    "memory_to_record",
    "new_memory_id",
    "record_to_memory",
    "requested_memory_id",
    "segment_id",
    "summary_id",
]
