"""Agent hooks.

    fast.py          `memoryd hook`: the agent's payload to the daemon, its answer back
                     (standard library only)
    fallback.py      the same event over stores opened in-process when no daemon answers
    install.py       installing, inspecting and removing memoryd's entries in each agent's
                     settings (hooks and MCP)
    codex.py         Codex's config.toml: memoryd's MCP table, the `[features]` key its
                     hooks need, which of memoryd's hooks it has not trusted yet
    entries.py       memoryd's entries in an agent's JSON settings (hooks, `mcpServers`,
                     Claude's allow rules): recognised, merged in, taken out
    script.py        the copy of the shell hook client in the state directory (what the
                     installed hooks run), their command line, and what is wrong with it
    memoryd-hook.sh  the shell hook client: the payload as it is to the daemon
                     (`POST /v1/hook/<agent>/<event>`), anything else to `memoryd hook`
"""
