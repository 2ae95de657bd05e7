"""The PostgreSQL + pgvector memory backend, for memory shared across machines or a team.

    backend.py   PostgresMemoryBackend: the protocol's operations, delegating to:
    connection.py  the pool: connections retried, replaced after an outage, errors
    owner.py     Owner (on every row and statement), origin_id
    rows.py      rows <-> Memory and RecallResult values, the inserts, the chain query
    recall.py    recall without words, and in time order: filters and the weight in SQL
    forgetting.py  deletions with their audit rows, forgotten scopes
    edits.py     memories changed in place: superseded, rewritten, evidence, relabelled
    vectors.py   ChunkVectors: pending chunks embedded, query vectors, the HNSW index
    hybrid.py    hybrid recall's dialect: full-text and pgvector channels over chunks
    schema.py    versioned migrations, error translation, passwords kept out of messages

Needs the `postgres` extra (psycopg 3 and psycopg_pool): pip install 'memoryd[postgres]'.
"""

from memoryd.memory.backends.postgres.backend import PostgresMemoryBackend
from memoryd.memory.backends.postgres.owner import Owner, origin_id

__all__ = ["Owner", "PostgresMemoryBackend", "origin_id"]
