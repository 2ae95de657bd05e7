"""What happens to sessions after their messages are stored.

    expiry.py      active sessions with no new line become paused
    segments.py    unsynced messages cut into conversation segments (pure)
    extraction.py  "remember that ..." requests read out of messages (pure)
    recovery.py    segments saved to memory past `memory_sync_index`; its policy; sync_now
    retention.py   what expires, and when
    rate.py        a job's pace and its time to finish
    scheduling.py  the daemon's periodic jobs (the only APScheduler import)
"""
