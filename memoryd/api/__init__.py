"""The local API: every operation once, served on the daemon's socket or run in-process.

    registry.py    the registry (`OPERATIONS`) and `MemoryOps`, which audits each call
    shared.py      what the groups share (`OpsBase`), the runtime protocol, limits
    memory_ops.py  memory: recall, context, remember, correct, forget, get
    governance.py  forgetting a user, retention, the raw archive, holds, project links
    events.py      sessions and the hooks' events (transcripts followed, blocks given)
    args.py        the arguments' checks (one line, status 400)
    server.py      HTTP/1.1 on the Unix socket
"""
