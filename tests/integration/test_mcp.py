"""The MCP server: driven by the official SDK's client, in-process and over stdio."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest
from helpers import in_memory
from mcp import Client, StdioServerParameters

from memoryd.config import load_settings
from memoryd.mcp_server import MAX_ANSWER_CHARS, build_server

PROJECT = "/home/user/shop"
TOOLS = {"remember", "recall", "recall_temporal", "correct_memory", "forget_memory",
         "get_memory", "memory_context", "search_sessions"}


def _text(result: object) -> str:
    content = result.content  # type: ignore[attr-defined]
    return "\n".join(part.text for part in content)


@pytest.fixture
def settings(tmp_path: Path, clean_environment: Path) -> object:
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsources: []\n")
    return load_settings(config)


async def test_every_tool_works_in_process(settings: object) -> None:
    """remember, recall, get, correct, context, temporal, forget: each answers for a model."""
    server = build_server(settings, project_dir=PROJECT)  # type: ignore[arg-type]
    async with Client(in_memory(server)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == TOOLS
        made = await client.call_tool("remember", {
            "content": "checkout retries card payments three times"})
        assert not made.is_error
        memory_id = _text(made).split()[-1].rstrip(".")
        found = await client.call_tool("recall", {"query": "card payments retries"})
        assert memory_id in _text(found) and "three times" in _text(found)
        full = await client.call_tool("get_memory", {"memory_id": memory_id})
        assert '"provenance"' in _text(full)
        fixed = await client.call_tool("correct_memory", {
            "memory_id": memory_id, "new_content": "checkout retries card payments twice"})
        assert not fixed.is_error and memory_id in _text(fixed)
        block = await client.call_tool("memory_context", {"query": "card payments"})
        assert _text(block).startswith("<memory_context>") and "twice" in _text(block)
        assert "three times" not in _text(block)
        recent = await client.call_tool("recall_temporal", {"since": "yesterday"})
        assert "twice" in _text(recent)
        new_id = _text(fixed).split()[-1].rstrip(".")
        gone = await client.call_tool("forget_memory", {"memory_id": new_id})
        assert _text(gone) == "Forgotten."
        none = await client.call_tool("recall", {"query": "card payments retries"})
        assert _text(none) == "Nothing in memory is relevant to this query."
    # What the tools gave the agent is on record.
    db = settings.database_path  # type: ignore[attr-defined]
    with sqlite3.connect(db) as conn:
        events = {row[0] for row in conn.execute("SELECT event FROM injections")}
    assert {"recall", "memory_context"} <= events


async def test_errors_are_one_clear_tool_error(settings: object) -> None:
    """Unknown ids, empty content and bad time phrases come back as MCP tool errors."""
    server = build_server(settings, project_dir=PROJECT)  # type: ignore[arg-type]
    async with Client(in_memory(server)) as client:
        missing = await client.call_tool("get_memory", {"memory_id": "0" * 32})
        assert missing.is_error and "no memory" in _text(missing)
        empty = await client.call_tool("remember", {"content": "   "})
        assert empty.is_error and "content is empty" in _text(empty)
        when = await client.call_tool("recall", {"query": "x", "since": "the other day"})
        assert when.is_error and "since" in _text(when)
        both = await client.call_tool("correct_memory", {"new_content": "x"})
        assert both.is_error and "memory_id or query" in _text(both)


async def test_answers_are_bounded(settings: object) -> None:
    """However much matches, an answer stays within MAX_ANSWER_CHARS."""
    server = build_server(settings, project_dir=PROJECT)  # type: ignore[arg-type]
    async with Client(in_memory(server)) as client:
        for i in range(40):
            await client.call_tool("remember", {"content": f"widget fact {i} " + "pad " * 400})
        found = await client.call_tool("recall", {"query": "widget fact", "limit": 40})
        assert len(_text(found)) <= MAX_ANSWER_CHARS


async def test_search_sessions_finds_stored_conversation(settings: object, tmp_path: Path
                                                         ) -> None:
    """search_sessions reads the stored messages themselves, newest first."""
    from memoryd.store.database import open_store

    async with open_store(settings) as conn:  # type: ignore[arg-type]
        await conn.execute(
            "INSERT INTO sessions (id, source, external_id, project, transcript_path, status,"
            " started_at, last_message_at, message_count, created_at) VALUES (1, 'codex', 'abc',"
            " ?, '/t.jsonl', 'active', '2026-11-17T10:00:00Z', '2026-11-17T10:00:00Z', 1,"
            " '2026-11-17T10:00:00Z')",
            (PROJECT,))
        await conn.execute(
            "INSERT INTO session_messages (session_id, message_index, role, kind, content,"
            " timestamp, raw, byte_offset, is_sidechain, dedupe_key) VALUES (1, 0, 'tool',"
            " 'tool_call', 'make migrate-db ENV=staging', '2026-11-17T10:00:00Z', x'00', 0, 0,"
            " 'k0')")
        await conn.commit()
    server = build_server(settings, project_dir=PROJECT)  # type: ignore[arg-type]
    async with Client(in_memory(server)) as client:
        found = await client.call_tool("search_sessions", {"query": "migrate-db staging"})
        assert "make migrate-db ENV=staging" in _text(found) and "codex session abc" in _text(
            found)
        other = await client.call_tool("search_sessions", {"query": "migrate-db",
                                                           "project": "/elsewhere"})
        assert "No stored message" in _text(other)


async def test_stdio_server_as_a_real_process(settings: object, tmp_path: Path) -> None:
    """`memoryd mcp` over stdio, started as an agent would, answers the SDK's client."""
    config = tmp_path / "config.yaml"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memoryd", "--config", str(config), "mcp"],
        env={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "PYTHONPATH": os.pathsep.join(sys.path)},
        cwd=str(tmp_path))
    async with Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == TOOLS
        made = await client.call_tool("remember", {"content": "the stdio server works"})
        assert not made.is_error
        found = await client.call_tool("recall", {"query": "stdio server"})
        assert "the stdio server works" in _text(found)


async def test_a_refused_argument_is_one_line_without_its_value(settings: object) -> None:
    """A wrong or missing argument is one line naming the argument: no pydantic dump, no
    link, and never the value given (a secret pasted in the wrong place stays out)."""
    token = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    server = build_server(settings, project_dir=PROJECT)  # type: ignore[arg-type]
    async with Client(in_memory(server)) as client:
        for arguments in ({"query": "x", "limit": token, "since": 5}, {}):
            refused = await client.call_tool("recall", arguments)
            text = _text(refused)
            assert refused.is_error and "\n" not in text and len(text) < 300, text
            assert "http" not in text and token not in text and "input_value" not in text
            assert text.startswith("recall: ")
        assert "limit:" in _text(await client.call_tool(
            "recall", {"query": "x", "limit": token}))


async def test_each_tool_says_whether_it_changes_memory(settings: object) -> None:
    """Issue 32.5: read-only tools say so (a client may run them without asking; `codex
    exec` calls them only then); forget says it deletes."""
    server = build_server(settings, project_dir=PROJECT)  # type: ignore[arg-type]
    async with Client(in_memory(server)) as client:
        tools = {tool.name: tool.annotations for tool in (await client.list_tools()).tools}
    read_only = {name for name, notes in tools.items() if notes and notes.read_only_hint}
    assert read_only == {"recall", "recall_temporal", "get_memory", "memory_context",
                         "search_sessions"}
    forget = tools["forget_memory"]
    assert forget is not None and forget.destructive_hint is True
    assert all(notes is not None and notes.open_world_hint is False for notes in tools.values())


def test_stdio_server_without_a_daemon_ends_quietly_when_the_client_goes(
        tmp_path: Path) -> None:
    """Issue 32.11: with the daemon down, `memoryd mcp` printed an asyncio error at every
    session end. A client that calls a tool and closes stdin mid-way gets its answers, and
    the server exits 0 with nothing on stderr but its log lines."""
    import json
    import subprocess

    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsources: []\n")
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "recall", "arguments": {"query": "anything"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "remember", "arguments": {"content": "closing mid-call"}}}]
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    env = {k: v for k, v in env.items() if not k.startswith("MEMORYD_")}
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "--config", str(config), "mcp", "--agent", "codex"],
        input="".join(json.dumps(line) + "\n" for line in lines), capture_output=True,
        text=True, timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines())}
    assert answers[1]["result"]["serverInfo"]["name"] == "memoryd"
    assert answers[2]["result"]["content"][0]["text"] == (
        "Nothing in memory is relevant to this query.")
    assert answers[3]["result"]["isError"] is False
    assert "Traceback" not in done.stderr and "RuntimeError" not in done.stderr


def test_a_line_nested_beyond_reason_is_a_parse_error_not_a_crash(tmp_path: Path) -> None:
    """200,000 `[` on one line (issue 61.14): answered as a parse error, and the server
    answers the requests after it."""
    import json
    import subprocess

    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsources: []\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONPATH=os.pathsep.join(sys.path))
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "--config", str(config), "mcp"],
        input="[" * 200_000 + "\n" + json.dumps(hello) + "\n", capture_output=True,
        text=True, timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers[0]["error"]["code"] == -32700
    assert answers[1]["result"]["serverInfo"]["name"] == "memoryd"
    assert "Traceback" not in done.stderr


def test_the_handshake_loads_neither_the_sdk_nor_the_settings(tmp_path: Path) -> None:
    """Issue 32.4: agents send their first request without waiting long for an MCP server;
    `memoryd mcp` answered in 1.6-1.8 s on the official SDK. Its handshake now loads
    neither the SDK nor memoryd's settings, stores or command line (they come with the
    first tool call)."""
    import json
    import subprocess

    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsources: []\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONPATH=os.pathsep.join(sys.path))
    # A full command checks the file; the quick path trusts only a file checked where its
    # state directory already was (the first command here creates it, the second notes).
    for command in (["ingest", "--once"], ["status"]):
        subprocess.run([sys.executable, "-m", "memoryd", "--config", str(config), *command],
                       env=env, check=True, capture_output=True, timeout=60)
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memoryd", "--config", str(config), "mcp",
         "--agent", "claude"], input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines())}
    assert answers[1]["result"]["protocolVersion"] == "2025-11-25"
    assert len(answers[2]["result"]["tools"]) == 8
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "memoryd.mcp_protocol" in imported
    heavy = {"mcp", "memoryd.config", "memoryd.cli.common", "pydantic_settings",
             "memoryd.client", "aiosqlite"} & imported
    assert heavy == set()
