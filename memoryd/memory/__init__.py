"""Memory: the protocol every store implements, its values, the rules they share, and
the backends.

    opening.py    opening the configured memory (the one place): owners, layers, chain
    protocol.py   what every backend does (MemoryBackend) and declares (Capability)
    models.py     the values: Memory, ConversationSegment, RecallResult, ...
    policy.py     the forgetting rules, once (backends keep only their dialect)
    writes.py     the Memory values every backend stores: defaults, checks, masks
    export_format.py  export/import records
    chain.py      layers in order, with outbox.py holding what a layer missed
    layers.py     a layer: its backend opened lazily, retried after a failed open
    draining.py   the outbox replayed to the primary, parked entries resolved, its depth
    backends/     sqlite/ (the default), postgres/, jsonl.py, gateway.py
    recall/       chunks, words, gate, fusion, ranking, rerank, sessions, spoken_time,
                  context (the block)
    privacy/      redaction (secrets, personal data), scanner (every rule in one scan),
                  masking (extra patterns), clipping (masked before cut)
    embeddings/   the embedders (the local model under ONNX Runtime or NumPy,
                  OpenAI-compatible endpoints)
"""

from typing import TYPE_CHECKING, Any

from memoryd.memory.export_format import SCHEMA_VERSION, memory_to_record, record_to_memory
from memoryd.memory.models import (
    DECAYING_TYPES,
    DEFAULT_IMPORTANCE,
    DIGEST_KIND,
    ConversationSegment,
    DeletionMode,
    DeletionRecord,
    DistilledMemory,
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
from memoryd.memory.protocol import Capability, MemoryBackend, RecallOrder, require

if TYPE_CHECKING:
    from memoryd.memory.backends.sqlite import SQLiteMemoryBackend

__all__ = [
    "DECAYING_TYPES",
    "DEFAULT_IMPORTANCE",
    "DIGEST_KIND",
    "SCHEMA_VERSION",
    "Capability",
    "ConversationSegment",
    "DeletionMode",
    "DeletionRecord",
    "DistilledMemory",
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
        from memoryd.memory.backends.sqlite import SQLiteMemoryBackend

        return SQLiteMemoryBackend
    raise AttributeError(f"module 'memoryd.memory' has no attribute {name!r}")
