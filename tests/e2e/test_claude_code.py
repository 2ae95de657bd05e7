"""Claude Code itself (the pinned CLI from the npm registry), end to end (issue 32.1):
installed as the README says, run with `claude -p` against a fake Anthropic server
inside a network namespace with loopback only; the assertions are on what the model
received.

Skipped, loudly, where the CLI cannot be installed or no network namespace can be made
(not root, no `unshare`); `E2E_AGENTS_REQUIRED=1` (set by `.ci/run`) turns that skip
into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pins import Unavailable, installed

HERE = Path(__file__).resolve().parent
DECISION = "ledger service"

pytestmark = pytest.mark.slow


def _cannot(reason: str) -> None:
    message = f"END-TO-END TESTS NOT RUN: {reason}"
    if os.environ.get("E2E_AGENTS_REQUIRED") == "1":
        pytest.fail(message)
    print(message, file=sys.stderr)
    pytest.skip(message)


def _namespace_works() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "`unshare` or `ip` is missing"
    done = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"],
                          capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"no network namespace: {done.stderr.strip()}"


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    trouble = _namespace_works()
    if trouble:
        _cannot(trouble)
    try:
        claude = installed("claude")
    except Unavailable as exc:
        _cannot(str(exc))
    work = tmp_path_factory.mktemp("claude-story")
    done = subprocess.run(["unshare", "-n", sys.executable, str(HERE / "claude_story.py"),
                           str(work), str(claude)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    steps: list[dict[str, Any]] = json.loads((work / "steps.json").read_text())
    for step in steps:
        step["texts"] = [json.dumps(body) for body in step["requests"]]
    steps.append({"name": "memories", "lines": (work / "memories.jsonl").read_text()})
    return steps


def _step(story: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(step for step in story if step["name"] == name)


def test_a_killed_sessions_decision_is_in_the_next_sessions_first_request(
        story: list[dict[str, Any]]) -> None:
    killed = _step(story, "killed")
    assert killed["status"] is None  # SIGKILL while the model was answering
    first = _step(story, "next")["texts"][0]
    assert first.count("<memory_context>") == 1 and DECISION in first
    assert _step(story, "next")["status"] == 0


def test_a_related_prompt_is_given_the_block_once_an_unrelated_one_none(
        story: list[dict[str, Any]]) -> None:
    """Each later session gets the start block once; a prompt never repeats it."""
    for name in ("related", "unrelated"):
        step = _step(story, name)
        assert step["status"] == 0, step["stderr"]
        assert all(text.count("<memory_context>") <= 1 for text in step["texts"])
        assert "UserPromptSubmit hook additional context" not in " ".join(step["texts"])


def test_a_hung_or_stopped_daemon_never_holds_the_agent_up(
        story: list[dict[str, Any]]) -> None:
    hung, stopped = _step(story, "daemon hung"), _step(story, "daemon stopped")
    assert hung["status"] == 0 and hung["seconds"] < 30, hung["stderr"]
    assert "<memory_context>" not in " ".join(hung["texts"])
    assert stopped["status"] == 0 and stopped["seconds"] < 30, stopped["stderr"]


def test_memory_after_six_sessions_holds_no_block_of_its_own(
        story: list[dict[str, Any]]) -> None:
    memories = [json.loads(line) for line in _step(story, "memories")["lines"].splitlines()]
    assert len([m for m in memories if m["type"] == "session_digest"]) >= 6
    for memory in memories:
        assert "memory_context" not in memory["content"], memory
        assert "reference data recalled" not in memory["content"], memory
