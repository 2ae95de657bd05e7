"""The PostgreSQL + pgvector memory backend, for memory shared across machines or a team.

    backend.py   PostgresMemoryBackend: the protocol's operations, owners, recall
    hybrid.py    hybrid recall's dialect: full-text and pgvector channels over chunks
    schema.py    versioned migrations, error translation, passwords kept out of messages

Needs the `postgres` extra (psycopg 3 and psycopg_pool): pip install 'memoryd[postgres]'.
"""

from memoryd.memory.backends.postgres.backend import Owner, PostgresMemoryBackend, origin_id

__all__ = ["Owner", "PostgresMemoryBackend", "origin_id"]
