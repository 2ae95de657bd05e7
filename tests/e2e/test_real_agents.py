"""The real agents (the pinned CLIs from the npm registry), end to end (issue 32.1):
installed as the README says, each run non-interactively against a fake model server for
its API inside a network namespace with loopback only (`story.py`); the assertions are on
what the model received.

Skipped, loudly, where a CLI cannot be installed or no network namespace can be made
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
from plan_answer import DECIDED, TASKS, TRIVIA

HERE = Path(__file__).resolve().parent
DECISION = "ledger service"
#: memoryd's block as it reads in a JSON request body (a tool's description may name the
#: tag, so the tag alone is not the block); Gemini CLI escapes hook context.
BLOCKS = ("<memory_context>\\n", "&lt;memory_context&gt;\\n")
#: A tool call's answer in the next request, after the call's id, per API.
ANSWERS = {"claude": ('"tool_result"', "toolu_recall_1"),
           "codex": ('"function_call_output"', "call_recall_1"),
           "gemini": ('"functionResponse"', '"functionResponse"')}


def blocks(text: str) -> int:
    return sum(text.count(block) for block in BLOCKS)

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


Story = dict[str, Any]


@pytest.fixture(scope="module", params=["claude", "codex", "gemini"])
def story(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Story:
    agent: str = request.param
    trouble = _namespace_works()
    if trouble:
        _cannot(trouble)
    try:
        executable = installed(agent)
    except Unavailable as exc:
        _cannot(str(exc))
    work = tmp_path_factory.mktemp(f"{agent}-story")
    done = subprocess.run(["unshare", "-n", sys.executable, str(HERE / "story.py"), agent,
                           str(work), str(executable)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    steps: list[dict[str, Any]] = json.loads((work / "steps.json").read_text())
    for step in steps:
        step["texts"] = [json.dumps(body) for body in step["requests"]]
    return {"agent": agent, "steps": {step["name"]: step for step in steps},
            "memories": [json.loads(line) for line in
                         (work / "memories.jsonl").read_text().splitlines()],
            "sessions": json.loads((work / "sessions.json").read_text() or "[]"),
            "installed": (work / "installed.txt").read_text()}


def test_a_killed_sessions_decision_is_in_the_next_sessions_first_request(
        story: Story) -> None:
    killed, following = story["steps"]["killed"], story["steps"]["next"]
    assert killed["status"] is None  # SIGKILL while the model was answering
    first = following["texts"][0]
    assert blocks(first) == 1 and DECISION in first
    assert following["status"] == 0, following["stderr"]


def test_a_decision_stated_mid_session_and_its_tasks_lead_the_next_briefing(
        story: Story) -> None:
    """Issue 62.7: the plan's decision (stated before its tasks, not in its last words)
    and the tasks Claude Code recorded with TaskCreate are in the next session's first
    request, after three one-question sessions; the questions are not."""
    planned = story["steps"]["planned"]
    assert planned["status"] == 0, planned["stderr"]
    first = story["steps"]["next"]["texts"][0]
    assert blocks(first) == 1
    assert DECIDED in first.replace("\\n", " ")
    assert TRIVIA not in first
    if story["agent"] == "claude":
        assert any('"tool_use_id": "toolu_task_2"' in text for text in planned["texts"]), (
            "TaskCreate was never called")
        assert all(task in first for task in TASKS), first[-3000:]


def test_a_resumed_session_is_not_told_again_what_it_was_told(story: Story) -> None:
    """Issue 62.5: `claude -p --continue`, `codex exec resume --last`, `gemini --resume
    latest`, twice: the conversation holds the start block once, however often resumed."""
    for name in ("resumed", "resumed again"):
        step = story["steps"][name]
        assert step["status"] == 0, step["stderr"]
        assert step["texts"], f"{name}: the model was never asked"
        assert blocks(step["texts"][0]) <= 1, name
    if story["agent"] != "gemini":  # Gemini CLI sends a resumed chat's last turn only
        assert "what should we do next?" in story["steps"]["resumed again"]["texts"][0]


def test_a_block_is_given_once_and_an_unrelated_prompt_gets_none(story: Story) -> None:
    """Each later session gets the start block once; a prompt never repeats it."""
    for name in ("related", "unrelated"):
        step = story["steps"][name]
        assert step["status"] == 0, step["stderr"]
        assert all(blocks(text) <= 1 for text in step["texts"])
        assert "UserPromptSubmit hook additional context" not in " ".join(step["texts"])
    unrelated = story["steps"]["unrelated"]["texts"]
    # The prompt's own request: the block it holds is the start block, not a second one.
    assert sum(blocks(text) for text in unrelated[:1]) <= 1


def test_the_recall_tool_round_trips(story: Story) -> None:
    """The model calls memoryd's recall tool non-interactively, with the default install,
    and the next request brings the decision back as the tool's answer."""
    texts = story["steps"]["related"]["texts"]
    assert len(texts) >= 2, "the agent never answered the tool call"
    answered = texts[-1]
    kind, call = ANSWERS[story["agent"]]
    assert kind in answered
    assert DECISION in answered.rsplit(call, 1)[1]
    assert "is_error\": true" not in answered


def test_a_hung_or_stopped_daemon_never_holds_the_agent_up(story: Story) -> None:
    hung, stopped = story["steps"]["daemon hung"], story["steps"]["daemon stopped"]
    assert hung["status"] == 0 and hung["seconds"] < 30, hung["stderr"]
    assert blocks(" ".join(hung["texts"])) == 0
    assert stopped["status"] == 0 and stopped["seconds"] < 30, stopped["stderr"]


def test_memory_after_six_sessions_holds_no_block_of_its_own(story: Story) -> None:
    memories = story["memories"]
    assert len([m for m in memories if m["type"] == "session_digest"]) >= 6
    for memory in memories:
        assert "memory_context" not in memory["content"], memory
        assert "reference data recalled" not in memory["content"], memory
        assert "score 0." not in memory["content"], memory  # a recall answer, remembered


def test_install_sets_no_deprecated_key_and_sessions_end(story: Story) -> None:
    deprecated = [s["name"] for s in story["steps"].values() if "deprecated" in s["stderr"]]
    assert deprecated == [], story["steps"][deprecated[0]]["stderr"] if deprecated else ""
    finished = [s for s in story["sessions"] if s.get("status") == "ended"]
    assert len(finished) >= 4, story["sessions"]


def test_memoryds_tools_are_there_from_a_sessions_first_request(story: Story) -> None:
    """Issue 32.4: neither agent waits long for an MCP server; memoryd's answered too late
    for one session in seven until it started in a fraction of a second."""
    for step in story["steps"].values():
        if step["name"] == "distill":
            continue  # memoryd's own run of the CLI as a model, not a person's session
        assert "mcp__memoryd" in step["texts"][0] or "mcp_memoryd_recall" in step["texts"][0], (
            step["name"])


def test_the_agents_own_cli_as_the_distillation_model(story: Story) -> None:
    """Issue 33: `memoryd distill` with `memory.llm.provider: <agent>-cli` runs the real
    CLI, which asks the (fake) model; the decision it answers becomes an observation with
    the session's provenance, and nothing of the CLI's own run is memory."""
    step = story["steps"]["distill"]
    assert step["status"] == 0, step["stderr"]
    asked = [text for text in step["texts"] if "You read one excerpt" in text]
    assert asked, "the model never got the distillation prompt"
    assert any("[0] user: " in text for text in asked)
    assert blocks(" ".join(asked)) == 0  # memoryd's hooks stay out of the CLI's run
    observations = [m for m in story["memories"] if m["type"] == "observation"]
    assert [m["content"] for m in observations] == [
        "Refunds go through the ledger service, never straight to the PSP."], step["stdout"]
    assert set(observations[0]["tags"]) == {"distilled", "decision"}
    assert observations[0]["provenance"]["session_external_id"]
