"""Secrets are masked before any cut, on every surface (issue 61.3): a real daemon reads a
session whose secrets straddle every limit a digest, a segment's line and a tool's line
cut at; then memory (export), recall, both hooks as installed, MCP, the viewer and what
distillation sends a model hold no 8-character run of any of them."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import wait_for
from mcp import Client, StdioServerParameters
from test_agents import PROJECT, Daemon, claude_payload, context_of, quick_daemon
from test_hook_client import Client as InstalledHooks

from memoryd.lifecycle.agent_tools import COMMAND_CHARS
from memoryd.lifecycle.digest import COMMAND_PART_CHARS, CONCLUSION_CHARS, REQUEST_CHARS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distill"))
from fake_model import FakeModel, items_text, serve

SECRETS = {
    "ghp_Zq8RkT2mWvX9pL4nB7cD1eF3gH5jK0sUaYbW": "Zq8RkT2mWvX9pL4nB7cD1eF3gH5jK0sUaYbW",
    "redis://:d7bboU9Js0nlXq2w@cache.internal:6379/0": "d7bboU9Js0nlXq2w",
    "sq0atp-ct3SZtYjotNpqTYZL4mQ8w": "ct3SZtYjotNpqTYZL4mQ8w",
    "maria.kowalska@example-corp.com": "maria.kowalska@example-corp",
}
_WORDS = ("the ledger service owns invoice numbering and the deploy runs on staging "
          "before prod ") * 20


def _at(position: int, secret: str) -> str:
    """Words, then `secret` starting at `position`, then more words."""
    return _WORDS[:position - 1] + " " + secret + " " + _WORDS[:200]


def _pieces() -> set[str]:
    return {part[i:i + 8] for part in SECRETS.values() for i in range(len(part) - 7)}


def _leaks(text: str) -> list[str]:
    return sorted(p for p in _pieces() if p in text)


def _session(when: datetime) -> str:
    """A Claude Code session where each secret straddles each cut: requests (160), the
    conclusion (300), commands (60, 80), a failure's line (120, 160), a todo item."""
    lines: list[dict[str, Any]] = []

    def add(kind: str, message: dict[str, Any]) -> None:
        n = len(lines)
        lines.append({"type": kind, "uuid": f"u{n}", "sessionId": "leaky", "cwd": PROJECT,
                      "timestamp": (when + timedelta(seconds=n)).isoformat()
                      .replace("+00:00", "Z"), "message": message})

    for number, secret in enumerate(SECRETS):
        add("user", {"role": "user", "content": _at(REQUEST_CHARS - 6, secret)})
        call = f"t{number}"
        command = "make deploy " + _at(COMMAND_PART_CHARS - 14, secret)
        add("assistant", {"role": "assistant", "content": [
            {"type": "tool_use", "id": call, "name": "Bash",
             "input": {"command": command[:COMMAND_CHARS + 40]}}]})
        add("user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call, "is_error": True,
             "content": "Error: " + _at(114, secret)}]})
        todo = f"d{number}"
        add("assistant", {"role": "assistant", "content": [
            {"type": "tool_use", "id": todo, "name": "TodoWrite", "input": {"todos": [
                {"content": _at(REQUEST_CHARS - 3, secret), "status": "pending"}]}}]})
        add("assistant", {"role": "assistant", "content": [
            {"type": "text", "text": _at(CONCLUSION_CHARS - 7, secret)}]})
    return "".join(json.dumps(line) + "\n" for line in lines)


@pytest.fixture
def model() -> Iterator[FakeModel]:
    with serve() as server:
        yield server


@pytest.fixture
def leaky(tmp_path: Path, model: FakeModel) -> Iterator[Daemon]:
    model.default = lambda _body: (200, {}, items_text())
    with quick_daemon(tmp_path, memory={
            "embeddings": {"provider": "none"},
            "llm": {"provider": "openai", "base_url": model.url + "/v1",
                    "model": "small-model"}}) as daemon:
        folder = daemon.claude_root / "-home-user-payments-api"
        folder.mkdir()
        (folder / "leaky.jsonl").write_text(_session(datetime.now(UTC) - timedelta(hours=2)))
        daemon.start()
        yield daemon


def _mcp(daemon: Daemon) -> str:
    import anyio

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memoryd", "--config", str(daemon.config), "mcp"],
        env={**daemon.env, "PYTHONPATH": os.pathsep.join(sys.path)}, cwd=str(daemon.tmp))

    async def ask() -> str:
        async with Client(params) as client:
            said = []
            for tool, args in (("recall", {"query": "ledger deploy staging",
                                           "all_projects": True}),
                               ("search_sessions", {"query": "deploy", "all_projects": True}),
                               ("memory_context", {"query": "ledger deploy",
                                                   "project": PROJECT})):
                found = await client.call_tool(tool, args)
                said += [part.text for part in found.content]  # type: ignore[union-attr]
            return "\n".join(said)

    return anyio.run(ask)


def _viewer(daemon: Daemon) -> str:
    url = daemon.cli("ui", "--no-browser").stdout.strip()
    base = url.split("/login")[0]
    with httpx.Client(base_url=base, timeout=30) as browser:
        assert browser.get(url.replace(base, "")).status_code == 303
        listed = browser.get("/sessions").text
        found = re.search(r'href="(/sessions/[^"]+)"', listed)
        assert found is not None, listed
        pages = [listed, browser.get(found.group(1)).text,
                 browser.get("/memories?q=ledger").text]
    return "\n".join(pages)


def test_no_surface_shows_a_piece_of_a_secret_cut_anywhere(leaky: Daemon,
                                                          model: FakeModel) -> None:
    daemon = leaky

    def digested() -> bool:
        found = daemon.api("recall", {"query": "", "types": ["session_digest"],
                                      "all_projects": True}).json()["results"]
        return bool(found)

    wait_for(digested, timeout=60, what="the session saved and digested")
    wait_for(lambda: bool(model.requests), timeout=60, what="distillation sent a segment")
    installed = InstalledHooks(daemon)
    surfaces = {
        "export": daemon.cli("export").stdout,
        "recall": daemon.cli("recall", "ledger deploy staging", "--all-projects",
                             "--json").stdout,
        "context": daemon.cli("context", "--project", PROJECT).stdout,
        "show": daemon.cli("show", "leaky").stdout,
        # Both hooks as `hooks install` wrote them (the shell client, through the daemon).
        "start hook": context_of(installed.run("claude", "SessionStart", claude_payload(
            "SessionStart", "next-session", source="startup"))) or "",
        "prompt hook": context_of(installed.run("claude", "UserPromptSubmit", claude_payload(
            "UserPromptSubmit", "next-session", prompt="what about the ledger deploy?")))
        or "",
        "mcp": _mcp(daemon),
        "viewer": _viewer(daemon),
        "model": "\n".join(json.dumps(r["body"]) for r in model.requests if r["body"]),
        "log": (daemon.tmp / "daemon.log").read_text(),
    }
    leaks = {name: _leaks(text) for name, text in surfaces.items()}
    assert not any(leaks.values()), {k: v for k, v in leaks.items() if v}
    # The surfaces said something: the secrets were there to leak, and were masked.
    assert "[REDACTED:" in surfaces["export"] and "Concluded" in surfaces["export"]
    assert surfaces["start hook"] and "[REDACTED:" in surfaces["model"]
