"""What happens to sessions after their messages are stored.

    expiry.py        active sessions with no new line become paused
    segments.py      unsynced messages cut into conversation segments (pure)
    extraction.py    "remember that ..." requests read out of messages (pure)
    recovery.py      segments saved to memory past `memory_sync_index`, then digests
    pipeline.py      recovery's two stages overlapped: pages read ahead, batches saved behind
    sync_policy.py   when recovery saves: `RecoveryPolicy`, due tails and questions, retries
    sync.py          `memoryd sync`: every unsynced message saved now (`sync_now`)
    digest.py        a session's digest as a value: its parts, rendered and read back (pure)
    digest_builder.py  a session's digest built from its messages: what it asked, changed,
                     ran, concluded, left open (pure)
    digest_tools.py  tool calls as a digest reads them: calls and results from each row's
                     line, commands that matter, outcomes, commits, todos (pure)
    agent_tools.py   each agent's tools as memory reads them: edits, commands, todos
    markup.py        what agents, IDEs and hooks put into a person's message, taken out
    coverage.py      whether the embedded memory still holds what the archive says it saved
    rebuild.py       `memoryd rebuild-memory`: memory saved again from the stored messages
    rerender.py      stored segments' text rendered again as segments are rendered now,
                     a step at a time (`store.upgrades`)
    repositories.py  stored projects that lie inside a git repository moved to the
                     repository's project, once
    retention.py     what expires, and when
    clock_trust.py   whether the wall clock may be trusted to delete by age
    throughput.py    a job's pace and its time to finish
    scheduling.py    the scheduler the daemon's periodic jobs run on (the only APScheduler
                     import)
"""
