"""The embedded memory backend: one SQLite file, FTS5 keyword search, optional vectors.

backend.py       SQLiteMemoryBackend: the protocol's operations, delegating to:
connection.py    the one connection: its lock, BEGIN IMMEDIATE writes, errors; the owner
bulk.py          rows written in one step: chunks, segment batches, imports
forgetting.py    deletions with their audit rows, forgotten scopes, the scrub
edits.py         memories changed in place: superseded, rewritten, evidence, relabelled
vectors.py       ChunkVectors: the index loaded in the background, query vectors, embedding
results.py       recall's rows and hybrid hits made RecallResult values
schema.py        versioned migrations, connection set-up, error translation
rows.py          rows <-> Memory values
recall.py        recall without words, and in time order: filters and the weight in SQL
hybrid.py        hybrid recall's dialect: FTS5 and vector-index channels over chunks
fts.py           user text -> a safe FTS5 query
vector_index.py  the in-memory, filter-first vector index (NumPy)
salvage.py       what still reads of a damaged memory.db, row by row (for
                 `memoryd rebuild-memory` and `memoryd export`)
"""

from memoryd.memory.backends.sqlite.backend import SQLiteMemoryBackend

__all__ = ["SQLiteMemoryBackend"]
