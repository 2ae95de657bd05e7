"""Agent hooks.

    fast.py      `memoryd hook`: the agent's payload to the daemon, its answer back
                 (standard library only)
    fallback.py  the same event over stores opened in-process when no daemon answers
    install.py   installing, inspecting and removing memoryd's entries in each agent's
                 settings (hooks and MCP)
"""
