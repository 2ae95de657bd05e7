"""Isolation between users, agents and projects, tried through every interface.

Real processes throughout: the CLI, `memoryd run` serving its socket, `memoryd hook`
processes, the MCP server driven by the official client, and `memoryd export`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import in_memory, memoryd_command, wait_for, write_config
from mcp import Client
from test_agents import Daemon, claude_line, context_of, quick_daemon

from memoryd.config import load_settings
from memoryd.mcp_server import build_server

PROJECT = "/home/user/payments-api"  # the project `claude_line` writes
CLAUDE_SECRET_FACT = "the staging vault unseals with the quorum of three operators"
SHARED_FACT = "the payments API rate limit is 500 requests per minute"


def _run(config: Path, env: dict[str, str], *args: str,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          input=stdin, capture_output=True, text=True, timeout=120)


def _recall_ids(done: subprocess.CompletedProcess[str]) -> set[str]:
    assert done.returncode == 0, done.stderr
    return {r["memory_id"] for r in json.loads(done.stdout)}


@pytest.fixture
def isolated(tmp_path: Path) -> Iterator[Daemon]:
    with quick_daemon(tmp_path, memory={"user": "alice", "private_agents": ["claude"]}) as found:
        yield found


def _remember(daemon: Daemon, text: str, *extra: str) -> str:
    done = daemon.cli("remember", text, "--project", PROJECT, "--json", *extra)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


# -- users ------------------------------------------------------------------------------

def test_another_user_never_reads_the_store(isolated: Daemon, tmp_path: Path) -> None:
    """The store belongs to alice: bob's CLI is refused with one line, directly and through
    alice's running daemon, and nothing of alice's reaches his output."""
    _remember(isolated, SHARED_FACT)
    bob = write_config(tmp_path / "bob.yaml", isolated.state, {"claude": isolated.claude_root},
                       memory={"user": "bob"})
    for running in (False, True):
        if running:
            isolated.start()
        for args in (["recall", "rate limit", "--json"], ["context", "--query", "rate limit"],
                     ["remember", "bob's note"], ["export"]):
            done = _run(bob, isolated.env, *args)
            assert done.returncode == 1, (args, done.stdout, done.stderr)
            assert "500 requests" not in done.stdout + done.stderr
            assert "'alice'" in done.stderr and "'bob'" in done.stderr
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    isolated.stop()
    # Bob's hook (the daemon down: it opens the stores itself) injects nothing; alice's does.
    payload = {"session_id": "b-1", "transcript_path": None, "cwd": PROJECT,
               "hook_event_name": "UserPromptSubmit", "prompt": "what is the rate limit?"}
    done = subprocess.run(memoryd_command("hook", "--agent", "claude", "UserPromptSubmit"),
                          input=json.dumps(payload), capture_output=True, text=True,
                          env={**isolated.env, "MEMORYD_CONFIG": str(bob)}, timeout=60)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    alice_hook = isolated.hook("claude", "UserPromptSubmit", payload, socket=False)
    assert "500 requests" in (context_of(alice_hook) or "")
    # Alice still reads hers, and bob's refused `remember` left nothing behind.
    done = isolated.cli("export")
    assert done.returncode == 0, done.stderr
    contents = [json.loads(line)["content"] for line in done.stdout.splitlines()]
    assert contents == [SHARED_FACT]


async def test_another_users_mcp_server_gets_nothing(
        isolated: Daemon, tmp_path: Path) -> None:
    """Bob's MCP server answers every tool with an error naming the owner."""
    _remember(isolated, SHARED_FACT)
    bob = write_config(tmp_path / "bob.yaml", isolated.state, {"claude": isolated.claude_root},
                       memory={"user": "bob"})
    server = build_server(load_settings(bob), project_dir=PROJECT, agent="claude")
    async with Client(in_memory(server)) as client:
        for tool, args in (("recall", {"query": "rate limit"}),
                           ("memory_context", {"query": "rate limit"}),
                           ("search_sessions", {"query": "rate"})):
            answer = await client.call_tool(tool, args)
            text = "\n".join(part.text for part in answer.content)  # type: ignore[union-attr]
            assert answer.is_error and "'alice'" in text and "500 requests" not in text


def test_the_jsonl_layer_refuses_another_user_too(tmp_path: Path) -> None:
    """A JSONL directory claimed by alice does not open for bob."""
    import asyncio

    from memoryd.clock import SystemClock
    from memoryd.errors import StoreOwnedElsewhere
    from memoryd.memory.backends.jsonl import JsonlMemoryBackend

    async def go() -> None:
        mine = await JsonlMemoryBackend.open(tmp_path / "j", clock=SystemClock(), owner="alice")
        await mine.remember("alice's fact")
        await mine.close()
        with pytest.raises(StoreOwnedElsewhere, match="'alice'"):
            await JsonlMemoryBackend.open(tmp_path / "j", clock=SystemClock(), owner="bob")
        again = await JsonlMemoryBackend.open(tmp_path / "j", clock=SystemClock(),
                                              owner="alice")
        assert [r.content for r in await again.recall("fact")] == ["alice's fact"]
        await again.close()

    asyncio.run(go())


# -- agents -----------------------------------------------------------------------------

def test_a_private_memory_reaches_only_its_agent_through_every_interface(
        isolated: Daemon) -> None:
    """Claude's private fact: the CLI, the daemon's API, hooks, MCP and export give it to
    claude only; a person sees it by id and in a full export."""
    isolated.start()
    shared = _remember(isolated, SHARED_FACT)
    private = _remember(isolated, CLAUDE_SECRET_FACT, "--agent", "claude", "--private")
    query = "vault unseals quorum operators"

    # The CLI.
    assert private not in _recall_ids(isolated.cli("recall", query, "--json"))
    assert private not in _recall_ids(isolated.cli("recall", query, "--json", "--agent", "codex"))
    assert private in _recall_ids(isolated.cli("recall", query, "--json", "--agent", "claude"))
    block = isolated.cli("context", "--query", query, "--agent", "codex")
    assert block.returncode == 0 and "vault" not in block.stdout
    assert "vault" in isolated.cli("context", "--query", query, "--agent", "claude").stdout

    # The daemon's API.
    def api(operation: str, body: dict[str, Any]) -> Any:
        return isolated.api(operation, body)

    found = api("recall", {"query": query, "agent": "codex"}).json()["results"]
    assert private not in {r["memory_id"] for r in found}
    assert private in {r["memory_id"] for r in api(
        "recall", {"query": query, "agent": "claude"}).json()["results"]}
    assert api("get_memory", {"memory_id": private, "agent": "codex"}).status_code == 404
    refused = api("correct", {"memory_id": private, "content": "x", "agent": "codex"})
    assert refused.status_code == 404
    assert api("forget", {"memory_id": private, "agent": "codex"}).json()["forgotten"] == 0
    context = api("context", {"query": query, "agent": "gemini"}).json()
    assert "vault" not in context["text"]

    # Hooks: each agent's prompt hook, through the daemon.
    def prompt(agent: str, event: str) -> str | None:
        payload = {"session_id": f"{agent}-1", "transcript_path": None, "cwd": PROJECT,
                   "hook_event_name": event, "prompt": "how does the vault unseal? quorum?"}
        return context_of(isolated.hook(agent, event, payload))

    assert "quorum of three" in (prompt("claude", "UserPromptSubmit") or "")
    assert "quorum of three" not in (prompt("codex", "UserPromptSubmit") or "")
    assert "quorum of three" not in (prompt("gemini", "BeforeAgent") or "")

    # Export: a person's full export holds it; codex's view does not.
    everything = [json.loads(line) for line in isolated.cli("export").stdout.splitlines()]
    assert {r["id"]: r.get("private_to") for r in everything} == {shared: None,
                                                                  private: "claude"}
    as_codex = isolated.cli("export", "--agent", "codex")
    assert [json.loads(line)["id"] for line in as_codex.stdout.splitlines()] == [shared]

    # A person sees it by id; it is still live after codex's attempts.
    shown = isolated.cli("show-memory", private, "--json")
    assert shown.returncode == 0 and CLAUDE_SECRET_FACT in shown.stdout
    assert '"deleted_at": null' in shown.stdout


async def test_the_mcp_server_of_one_agent_never_serves_another_agents_memory(
        tmp_path: Path, clean_environment: Path) -> None:
    """`memoryd mcp --agent codex` cannot recall, show, correct or forget claude's private
    memory, nor search claude's private sessions; `--agent claude` can."""
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nsources: []\n"
                      "memory: {user: alice, private_agents: [claude]}\n")
    settings = load_settings(config)
    claude = build_server(settings, project_dir=PROJECT, agent="claude")
    codex = build_server(settings, project_dir=PROJECT, agent="codex")
    async with Client(in_memory(claude)) as as_claude, Client(in_memory(codex)) as as_codex:
        made = await as_claude.call_tool("remember", {"content": CLAUDE_SECRET_FACT,
                                                      "private": True})
        private = made.content[0].text.split()[-1].rstrip(".")  # type: ignore[union-attr]
        await as_codex.call_tool("remember", {"content": SHARED_FACT})

        def text(result: Any) -> str:
            return "\n".join(part.text for part in result.content)

        assert "quorum" in text(await as_claude.call_tool("recall", {"query": "vault quorum"}))
        assert text(await as_codex.call_tool("recall", {"query": "vault quorum"})) == (
            "Nothing in memory is relevant to this query.")
        shown = await as_codex.call_tool("get_memory", {"memory_id": private})
        assert shown.is_error and "quorum" not in text(shown)
        fixed = await as_codex.call_tool("correct_memory", {"memory_id": private,
                                                            "new_content": "no quorum"})
        assert fixed.is_error
        gone = await as_codex.call_tool("forget_memory", {"memory_id": private})
        assert text(gone).startswith("No live memory")
        block = await as_codex.call_tool("memory_context", {"query": "vault quorum"})
        assert "quorum" not in text(block)
        assert "quorum" in text(await as_claude.call_tool("get_memory",
                                                          {"memory_id": private}))
        # Without a known agent, a private memory cannot be made.
        nobody = build_server(settings, project_dir=PROJECT)
        async with Client(in_memory(nobody)) as anonymous:
            refused = await anonymous.call_tool("remember", {"content": "x y z",
                                                             "private": True})
            assert refused.is_error


def test_private_agents_keep_their_conversations_to_themselves(isolated: Daemon) -> None:
    """With `private_agents: [claude]`, claude's conversation is saved private to claude:
    codex's hooks, MCP session search and recall never see it; claude's do."""
    now = datetime.now(UTC) - timedelta(minutes=5)
    project_dir = isolated.claude_root / "-home-user-payments-api"
    project_dir.mkdir()
    transcript = project_dir / "s-private.jsonl"
    transcript.write_text(
        claude_line("s-private", "u1", "user",
                    "the deploy key for orion rotates every ninety days", now)
        + claude_line("s-private", "u2", "assistant",
                      "Noted: orion's deploy key rotates every ninety days.",
                      now + timedelta(seconds=5)))
    isolated.start()
    query = "orion deploy key rotates"

    def synced() -> bool:
        done = isolated.cli("recall", query, "--json", "--agent", "claude")
        return done.returncode == 0 and bool(json.loads(done.stdout))

    wait_for(synced, timeout=60, what="the session saved to memory")
    found = json.loads(isolated.cli("recall", query, "--json", "--agent", "claude").stdout)
    assert all(r.get("private_to") == "claude" for r in found)
    assert _recall_ids(isolated.cli("recall", query, "--json", "--agent", "codex")) == set()
    assert _recall_ids(isolated.cli("recall", query, "--json")) == set()
    codex_hook = {"session_id": "x-1", "transcript_path": None, "cwd": PROJECT,
                  "hook_event_name": "UserPromptSubmit",
                  "prompt": "when does the orion deploy key rotate?"}
    assert "ninety" not in (context_of(isolated.hook("codex", "UserPromptSubmit",
                                                     codex_hook)) or "")
    start = context_of(isolated.hook("codex", "SessionStart", {
        "session_id": "x-2", "transcript_path": None, "cwd": PROJECT,
        "hook_event_name": "SessionStart", "source": "startup"}))
    assert "ninety" not in (start or "")
    # Session search: codex is not shown claude's private sessions, nor is a request that
    # names no agent (as recall: shared only; issue 61.14); claude is.
    as_codex = isolated.api("search_sessions", {"query": "orion", "agent": "codex"}).json()
    assert as_codex["messages"] == []
    unnamed = isolated.api("search_sessions", {"query": "orion"}).json()
    assert unnamed["messages"] == []
    as_claude = isolated.api("search_sessions", {"query": "orion", "agent": "claude"}).json()
    assert {m["external_id"] for m in as_claude["messages"]} == {"s-private"}


# -- projects ---------------------------------------------------------------------------

def test_projects_are_full_paths_and_a_renamed_folder_can_be_linked(
        isolated: Daemon, tmp_path: Path) -> None:
    """Two folders named `api` are two projects; after `project link OLD NEW` the old
    folder's memories and sessions are NEW's, and its later transcripts save under NEW."""
    first, second = "/work/a/api", "/work/b/api"
    a = isolated.cli("remember", "api a deploys with helm charts", "--project", first, "--json")
    b = isolated.cli("remember", "api b deploys with terraform", "--project", second, "--json")
    a_id, b_id = json.loads(a.stdout)["id"], json.loads(b.stdout)["id"]
    assert _recall_ids(isolated.cli("recall", "deploys", "--project", first, "--json")) == {
        a_id}
    assert _recall_ids(isolated.cli("recall", "deploys", "--project", second, "--json")) == {
        b_id}

    # A conversation in the old folder, then the folder is renamed and linked.
    old, new = PROJECT, "/home/user/payments-service"
    project_dir = isolated.claude_root / "-home-user-payments-api"
    project_dir.mkdir()
    now = datetime.now(UTC) - timedelta(minutes=5)
    (project_dir / "s-old.jsonl").write_text(
        claude_line("s-old", "o1", "user", "the ledger uses bankers rounding", now)
        + claude_line("s-old", "o2", "assistant", "Bankers rounding it is.",
                      now + timedelta(seconds=2)))
    fact = _remember(isolated, "refunds are batched hourly")
    assert isolated.cli("ingest", "--once").returncode == 0
    done = isolated.cli("sync")
    assert done.returncode == 0, done.stderr
    linked = isolated.cli("project", "link", old, new, "--json")
    assert linked.returncode == 0, linked.stderr
    report = json.loads(linked.stdout)
    assert report["sessions_moved"] == 1 and report["memories_moved"] >= 2
    assert fact in _recall_ids(isolated.cli("recall", "refunds batched", "--project", new,
                                            "--json"))
    # Asked by the old path (an agent started in a stale directory), it is the new project.
    by_old = json.loads(isolated.cli("recall", "refunds batched", "--project", old,
                                     "--json").stdout)
    assert [r["project"] for r in by_old if r["memory_id"] == fact] == [new]
    listed = isolated.cli("project", "links")
    assert f"{old} -> {new}" in listed.stdout
    sessions = json.loads(isolated.cli("sessions", "--json").stdout)
    assert {s["project"] for s in sessions} == {new}

    # The old folder's transcript grows (a resumed session): saved under the new path.
    with (project_dir / "s-old.jsonl").open("a") as handle:
        handle.write(claude_line("s-old", "o3", "user", "also the ledger closes at midnight",
                                 now + timedelta(seconds=30)))
    isolated.cli("ingest", "--once")
    isolated.cli("sync")
    found = json.loads(isolated.cli("recall", "ledger closes midnight", "--project", new,
                                    "--json", "--agent", "claude").stdout)
    assert found and all(r["project"] == new for r in found)

    # Bad input: one line, status 2 or 66.
    assert isolated.cli("project", "link", new, new).returncode == 2
    missing = isolated.cli("project", "unlink", "/never/linked")
    assert missing.returncode == 66 and len(missing.stderr.strip().splitlines()) == 1
