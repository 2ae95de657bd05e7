"""Discovering transcripts and following them into the store, exactly once.

    discovery.py    the transcripts under each root, what their paths tell, which
                    paths a hook may name (`admit_transcript`)
    identity.py     same file? renamed, moved by copy, replaced, rewritten: the rules
                    (`Resolver`), the fingerprints they read, the followed file's state
    framing.py      bytes into complete lines (no I/O)
    parsers/        one parser per agent's format (records into messages)
    tailer.py       reading one file from its offset into batches
    ingester.py     the loop: scan (identity resolved, moves committed), read, commit
    watcher.py      file notifications (watchfiles) that wake the loop
    once.py         `memoryd ingest --once`: one pass under the lock
"""
