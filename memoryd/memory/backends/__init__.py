"""The memory backends, each one dialect of the same protocol (`memory.protocol`).

    sqlite/     the embedded backend (the default): FTS5 and a vector index in one file
    postgres/   PostgreSQL + pgvector, shared by several memoryd (owner and origin columns)
    jsonl.py    append-only JSON lines, one file a project
    jsonl_files.py  its files: names, fsynced appends, torn tails cut, rewrites
    gateway.py  an HTTP Memory Gateway: recall, and conversation segments sent to it
                (a ledger of what was sent)
"""
