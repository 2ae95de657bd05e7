"""The local API: every operation once, served on the daemon's socket or run in-process.
It parses, calls the domain (`memoryd.domain`) and audits; nothing more.

    registry.py    the registry (`OPERATIONS`) and `MemoryOps`, which runs and audits each
    parse.py       each operation's JSON made into its typed request
    args.py        the arguments' checks (one line, status 400)
    server.py      HTTP/1.1 on the Unix socket
"""
