"""Memory backends: the protocol every store implements, its values, and the backends.

    opening.py    opening the configured memory (the one place): owners, layers, chain
    protocol.py   what every backend does (MemoryBackend) and declares (Capability)
    models.py     the values: Memory, ConversationSegment, RecallResult, ...
    policy.py     the forgetting rules, once (backends keep only their dialect)
    writes.py     the rows every SQL backend writes, in one shape
    chain.py      layers in order, with outbox.py holding what a layer missed
    masking.py    extra patterns masked at the one boundary before any layer
    redaction.py  secrets and personal data masked
    ranking.py    how recall weighs relevance, importance and age (every backend)
    fusion.py, rerank.py, words.py, gate.py   keyword/vector fusion, reranking, relevance
    chunks.py     memories cut into search units
    records.py    export/import records; context.py the block hooks inject
    embeddings/   the embedders (local ONNX model, OpenAI-compatible endpoints)
    sqlite/       the embedded backend (the default); postgres/ PostgreSQL + pgvector
    jsonl.py      an append-only file backend; gateway.py the HTTP Memory Gateway
"""

from typing import TYPE_CHECKING, Any

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
from daemon.memory.protocol import Capability, MemoryBackend, RecallOrder, require
from daemon.memory.records import SCHEMA_VERSION, memory_to_record, record_to_memory

if TYPE_CHECKING:
    from daemon.memory.sqlite import SQLiteMemoryBackend

__all__ = [
    "DECAYING_TYPES",
    "DEFAULT_IMPORTANCE",
    "SCHEMA_VERSION",
    "Capability",
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
    "require",
    "segment_id",
    "summary_id",
]


def __getattr__(name: str) -> Any:
    # The embedded backend loads on first use: commands that only mask text
    # (redaction, for logging) or read records should not pay for it.
    if name == "SQLiteMemoryBackend":
        from daemon.memory.sqlite import SQLiteMemoryBackend

        return SQLiteMemoryBackend
    raise AttributeError(f"module 'daemon.memory' has no attribute {name!r}")
