"""The code that speaks the daemon's SQL (`memoryd.db`).

    connection.py     opening the state database, transactions, its errors
    migrations.py     its schema, version by version
    database.py       open, migrate, hand over
    offsets.py        the exactly-once commit: a batch's rows and the file's new offset
    wal.py            the checkpointer that copies the log off the writer's path
    batches.py        values between the tailer and the store
    sessions.py       session status and `memory_sync_index`
    copies.py         which stored messages repeat an earlier one of their session (`Copies`)
    queries.py        read-only queries (status, sessions, show, search)
    forgotten.py      what was forgotten, by content, so copies stay forgotten
    distill_queue.py  saved segments waiting for a model, queued as the index moves
    upgrades.py       work done once over what is stored, a step at a time
    audit.py, injections.py, holds.py, links.py, raw.py, transcripts.py
                      the audit trail, blocks given, legal holds, project links, the raw
                      archive's text and lifecycle
"""

from memoryd.store.connection import connect, transaction
from memoryd.store.migrations import migrate

__all__ = ["connect", "migrate", "transaction"]
