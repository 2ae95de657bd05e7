"""The embedded memory backend: one SQLite file, FTS5 keyword search, optional vectors.

    backend.py       SQLiteMemoryBackend: the protocol's operations, transactions
    schema.py        versioned migrations, connection set-up, error translation
    rows.py          rows <-> Memory values
    recall.py        keyword recall: filters and the score in SQL
    hybrid.py        hybrid recall: keyword and vector channels over chunks, fused
    fts.py           user text -> a safe FTS5 query
    vector_index.py  the in-memory, filter-first vector index (NumPy)
"""

from memoryd.memory.backends.sqlite.backend import SQLiteMemoryBackend

__all__ = ["SQLiteMemoryBackend"]
