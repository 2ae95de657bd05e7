"""The parsers: which transcript records are messages, and what their rows hold."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import local_time_zone

from memoryd.ingest.parsers.claude import ClaudeParser
from memoryd.ingest.parsers.codex import CodexParser
from memoryd.ingest.parsers.common import image_placeholder, utc_timestamp
from memoryd.ingest.parsers.gemini import GeminiRecordParser, parse_document


def _claude(kind: str, content: object, **extra: Any) -> dict[str, Any]:
    role = "assistant" if kind == "assistant" else "user"
    return {"type": kind, "uuid": "u-1", "parentUuid": None, "isSidechain": False,
            "timestamp": "2025-09-03T00:47:19.293Z", "cwd": "/work",
            "message": {"role": role, "content": content}, **extra}


def _codex(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2025-10-21T20:04:19.139Z", "type": kind, "payload": payload}


# -- Claude Code ---------------------------------------------------------------------------


def test_claude_meta_user_line_is_injected() -> None:
    """`isMeta` user lines (a slash command's prompt, a caveat) are kept, as kind `injected`:
    written in the user's name, not typed by them."""
    outcome = ClaudeParser().parse(_claude("user", "Analyze this codebase.", isMeta=True))
    assert outcome.message is not None
    assert (outcome.message.role, outcome.message.kind) == ("user", "injected")
    assert outcome.message.content == "Analyze this codebase."


@pytest.mark.parametrize("origin", ["task-notification", "peer", "auto-continuation"])
def test_claude_user_line_the_harness_wrote_is_injected(origin: str) -> None:
    """Claude Code 2.1 names who wrote a user-role line (`origin.kind`): a task's
    notification or an automatic continuation is not what the person asked."""
    outcome = ClaudeParser().parse(_claude("user", "<task-notification>done</task-notification>",
                                           origin={"kind": origin}))
    assert outcome.message is not None and outcome.message.kind == "injected"
    typed = ClaudeParser().parse(_claude("user", "fix it", origin={"kind": "human"}))
    assert typed.message is not None and typed.message.kind == "message"


def test_claude_user_string_is_one_user_message() -> None:
    """A typed prompt becomes one user row with its uuid, UTC timestamp and the project hint."""
    outcome = ClaudeParser().parse(_claude("user", "hello there"))
    assert outcome.message is not None
    assert (outcome.message.role, outcome.message.kind) == ("user", "message")
    assert outcome.message.content == "hello there"
    assert outcome.message.uuid == "u-1"
    assert outcome.message.timestamp == "2025-09-03T00:47:19.293Z"
    assert outcome.hints["project"] == "/work"


def test_claude_text_blocks_are_joined() -> None:
    """Several text blocks in one line are joined into one readable content."""
    content = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    message = ClaudeParser().parse(_claude("assistant", content)).message
    assert message is not None
    assert message.content == "first\nsecond"


def test_claude_tool_use_is_a_tool_call_with_json_input() -> None:
    """An assistant tool_use block gives kind tool_call, its tool name and its input as JSON."""
    block = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
    message = ClaudeParser().parse(_claude("assistant", [block])).message
    assert message is not None
    assert (message.role, message.kind, message.tool_name) == ("assistant", "tool_call", "Bash")
    assert orjson.loads(message.tool_input or "null") == {"command": "ls"}


def test_claude_tool_result_is_a_tool_row_with_text() -> None:
    """A user line of tool_result blocks is a tool row whose content is the result text."""
    content = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "file-a\nfile-b"}]
    message = ClaudeParser().parse(_claude("user", content)).message
    assert message is not None
    assert (message.role, message.kind) == ("tool", "tool_result")
    assert message.content == "file-a\nfile-b"


def test_claude_tool_result_error_is_marked() -> None:
    """A tool_result with is_error true is marked as an error in the readable content."""
    content = [{"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True}]
    message = ClaudeParser().parse(_claude("user", content)).message
    assert message is not None
    assert message.content.startswith("[tool error]")
    assert "boom" in message.content


def test_claude_image_becomes_a_placeholder_with_its_size() -> None:
    """A pasted base64 image is stored as `[image/png N KB]`, never as its bytes."""
    data = base64.b64encode(b"\x89PNG" + bytes(84 * 1024 - 4)).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": data}}
    message = ClaudeParser().parse(_claude("user", [image, {"type": "text", "text": "what?"}]))
    assert message.message is not None
    assert message.message.content == "[image/png 84 KB]\nwhat?"
    assert data[:100] not in message.message.content


def test_claude_image_inside_a_tool_result_is_a_placeholder() -> None:
    """Images inside a tool_result's content list (screenshots) are placeholders too."""
    data = base64.b64encode(bytes(2048)).decode()
    inner = [{"type": "text", "text": "shot"},
             {"type": "image", "source": {"media_type": "image/jpeg", "data": data}}]
    content = [{"type": "tool_result", "tool_use_id": "t", "content": inner}]
    message = ClaudeParser().parse(_claude("user", content)).message
    assert message is not None
    assert message.content == "shot\n[image/jpeg 2 KB]"


def test_claude_thinking_is_marked_and_kept_apart() -> None:
    """A thinking-only line is kept, marked `[thinking]`, with kind thinking, not message."""
    block = {"type": "thinking", "thinking": "let me see", "signature": "sig"}
    message = ClaudeParser().parse(_claude("assistant", [block])).message
    assert message is not None
    assert message.kind == "thinking"
    assert message.content == "[thinking] let me see"


def test_claude_compact_boundary_is_a_system_row() -> None:
    """A system compact_boundary line is a row (recovery needs compaction points)."""
    record = {"type": "system", "subtype": "compact_boundary", "uuid": "b-1",
              "parentUuid": None, "content": "Conversation compacted",
              "compactMetadata": {"trigger": "auto", "preTokens": 170251},
              "timestamp": "2025-07-01T10:30:00.000Z"}
    message = ClaudeParser().parse(record).message
    assert message is not None
    assert (message.role, message.kind, message.uuid) == ("system", "compact_boundary", "b-1")
    assert orjson.loads(message.tool_input or "null")["preTokens"] == 170251


def test_claude_compact_summary_is_a_message_and_a_summary() -> None:
    """An isCompactSummary user line is still a row, and also feeds the session's summary."""
    text = "This session is being continued from a previous conversation."
    outcome = ClaudeParser().parse(_claude("user", text, isCompactSummary=True))
    assert outcome.message is not None
    assert outcome.message.kind == "compact_summary"
    assert outcome.summary == ("compact_summary", text)


def test_claude_summary_line_is_a_summary_not_a_message() -> None:
    """A `summary` line is kept as the session's summary and is not a message."""
    outcome = ClaudeParser().parse({"type": "summary", "summary": "Set up repo", "leafUuid": "x"})
    assert outcome.message is None
    assert outcome.summary == ("summary", "Set up repo")


@pytest.mark.parametrize(
    "record",
    [
        {"type": "progress", "uuid": "p", "data": {"type": "hook_progress"}},
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        {"type": "queue-operation", "operation": "enqueue", "content": "x"},
        {"type": "system", "subtype": "turn_duration", "durationMs": 5, "uuid": "s"},
        {"type": "system", "subtype": "api_error", "level": "error", "uuid": "s"},
        {"type": "attachment", "attachment": {"type": "hook_success"}},
        {"type": "tool_use", "name": "Bash"},
        {"no_type": True},
    ],
)
def test_claude_bookkeeping_is_skipped(record: dict[str, Any]) -> None:
    """Progress, snapshots, queue operations and other bookkeeping lines are not messages."""
    assert ClaudeParser().parse(record).message is None


def test_claude_sidechain_is_flagged() -> None:
    """An inline isSidechain line is a row of its file, flagged as sidechain."""
    message = ClaudeParser().parse(_claude("assistant", "sub", isSidechain=True)).message
    assert message is not None
    assert message.is_sidechain


@pytest.mark.parametrize("content", [None, 42, {"odd": True}, [1, "x", None]])
def test_claude_odd_content_still_makes_one_row(content: object) -> None:
    """A user/assistant line with content of an unexpected shape still makes one row."""
    assert ClaudeParser().parse(_claude("user", content)).message is not None


# -- Codex ---------------------------------------------------------------------------------


def _message(role: str, *texts: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": t} for t in texts]}


def test_codex_user_and_assistant_messages() -> None:
    """response_item messages of the user and the assistant are rows with their text."""
    parser = CodexParser()
    user = parser.parse(_codex("response_item", _message("user", "Build a timer"))).message
    reply = parser.parse(_codex("response_item", _message("assistant", "Done."))).message
    assert user is not None and reply is not None
    assert (user.role, user.content) == ("user", "Build a timer")
    assert (reply.role, reply.content) == ("assistant", "Done.")
    assert user.timestamp == "2025-10-21T20:04:19.139Z"


@pytest.mark.parametrize(
    "text",
    [
        "<environment_context>\n  <cwd>/x</cwd>\n</environment_context>",
        "<user_instructions>be terse</user_instructions>",
        "# AGENTS.md instructions for /x\n\n<INSTRUCTIONS>...</INSTRUCTIONS>",
        "<skill>\n<name>deploy</name>\n</skill>",
        "<user_shell_command>\nls\nExit code: 0\n</user_shell_command>",
        "<turn_aborted>\nThe user interrupted the previous turn.\n</turn_aborted>",
        '<subagent_notification>{"agent_path": "a", "status": "done"}</subagent_notification>',
        "<user_action>\n  <context>User initiated a review task.</context>\n</user_action>",
    ],
)
def test_codex_injected_boilerplate_is_not_a_user_message(text: str) -> None:
    """Environment and instruction context injected as a user message is not stored."""
    assert CodexParser().parse(_codex("response_item", _message("user", text))).message is None


CODEX_REVIEW = Path(__file__).parents[1] / "integration" / "data" / "codex-0.169-review"


def test_codex_labels_say_what_the_person_wrote() -> None:
    """Codex 0.169 labels each part of a user item (`content_item_kinds`, a provenance
    each): only `user.*` parts of the user's provenance are the person's; a part the
    harness wrote, labelled or (`unknown`) not, is not stored as their words. A review's
    thread (`source: {"subagent": "review"}`) belongs to the thread it was asked in. The
    real CLI's rollouts (`data/codex-0.169-review`)."""
    asked_in, review = sorted(CODEX_REVIEW.glob("rollout-*.jsonl"))
    said: dict[str, list[str]] = {}
    parents: dict[str, str | None] = {}
    for rollout in (asked_in, review):
        parser = CodexParser()
        words = said.setdefault(rollout.name, [])
        for line in rollout.read_bytes().splitlines():
            outcome = parser.parse(orjson.loads(line))
            if "parent_external_id" in outcome.hints or "external_id" in outcome.hints:
                parents[rollout.name] = outcome.hints.get("parent_external_id")
            if outcome.message is not None and outcome.message.role == "user":
                words.append(outcome.message.content)
    main_id = orjson.loads(asked_in.read_bytes().splitlines()[0])["payload"]["id"]
    assert parents == {asked_in.name: None, review.name: main_id}
    assert said[asked_in.name] == []  # only a `<user_action>` block: not typed
    assert [w[:40] for w in said[review.name]] == ["Review the current code changes (staged,"]
    assert not any("AGENTS.md" in w or "<environment_context>" in w
                   for words in said.values() for w in words)


def test_codex_labelled_parts_keep_only_the_persons() -> None:
    """One item with a harness part and a typed part: the typed part alone."""
    item = _message("user", "<environment_context>x</environment_context>", "fix the build")
    item["internal_chat_message_metadata_passthrough"] = {
        "content_item_kinds": ["environments.environment_context", "user.text"],
        "content_item_metadata": [{"provenance": {"type": "harness"}},
                                  {"provenance": {"type": "user"}}]}
    message = CodexParser().parse(_codex("response_item", item)).message
    assert message is not None and message.content == "fix the build"
    item["internal_chat_message_metadata_passthrough"]["content_item_kinds"] = [
        "environments.environment_context", "unknown"]
    assert CodexParser().parse(_codex("response_item", item)).message is None


def test_codex_developer_message_is_not_a_user_message() -> None:
    """A `developer` role message (system prompt material) is not stored."""
    record = _codex("response_item", _message("developer", "You are Codex"))
    assert CodexParser().parse(record).message is None


def test_codex_function_call_and_output() -> None:
    """function_call gives a tool_call with parsed JSON arguments; its output a tool row."""
    parser = CodexParser()
    call = parser.parse(_codex("response_item", {
        "type": "function_call", "name": "shell", "call_id": "c1",
        "arguments": '{"command":["ls","-la"]}'})).message
    output = parser.parse(_codex("response_item", {
        "type": "function_call_output", "call_id": "c1",
        "output": '{"output":"a\\nb","metadata":{"exit_code":0}}'})).message
    assert call is not None and output is not None
    assert (call.kind, call.tool_name) == ("tool_call", "shell")
    assert orjson.loads(call.tool_input or "null") == {"command": ["ls", "-la"]}
    assert (output.role, output.kind, output.content) == ("tool", "tool_result", "a\nb")


def test_codex_custom_tool_call_and_output() -> None:
    """custom_tool_call (apply_patch) and its output are rows; plain-text output is kept."""
    parser = CodexParser()
    call = parser.parse(_codex("response_item", {
        "type": "custom_tool_call", "name": "apply_patch", "call_id": "c2",
        "input": "*** Begin Patch\n*** End Patch"})).message
    output = parser.parse(_codex("response_item", {
        "type": "custom_tool_call_output", "call_id": "c2", "output": "Success."})).message
    assert call is not None and output is not None
    assert call.tool_name == "apply_patch"
    assert orjson.loads(call.tool_input or "null") == "*** Begin Patch\n*** End Patch"
    assert output.content == "Success."


def test_codex_compacted_is_a_row_and_a_summary() -> None:
    """A `compacted` record is a system row and its message feeds the summary."""
    outcome = CodexParser().parse(_codex("compacted", {
        "message": "We built a timer.", "replacement_history": [_message("user", "x")]}))
    assert outcome.message is not None
    assert (outcome.message.role, outcome.message.kind) == ("system", "compacted")
    assert outcome.summary == ("compacted", "We built a timer.")


@pytest.mark.parametrize(
    "record",
    [
        _codex("event_msg", {"type": "user_message", "message": "dup of a response_item"}),
        _codex("event_msg", {"type": "token_count", "info": None}),
        _codex("response_item", {"type": "reasoning", "summary": [], "encrypted_content": "g"}),
        _codex("turn_context", {"cwd": "/x", "model": "gpt-5-codex"}),
        {"record_type": "state"},
    ],
)
def test_codex_events_and_reasoning_are_skipped(record: dict[str, Any]) -> None:
    """UI events (which duplicate response items), reasoning and context are not rows."""
    assert CodexParser().parse(record).message is None


def test_codex_session_meta_names_the_session() -> None:
    """session_meta hints the agent's own session id and the working directory."""
    outcome = CodexParser().parse(_codex("session_meta", {"id": "019a-1", "cwd": "/repo"}))
    assert outcome.hints == {"external_id": "019a-1", "project": "/repo"}


def test_codex_unwrapped_legacy_items_are_messages() -> None:
    """Pre-0.44 rollouts wrote response items without an envelope: they are rows too."""
    parser = CodexParser()
    user = parser.parse({"role": "user", "message": "Translate",
                         "created_at": "2025-09-10T12:00:00Z"})
    item = parser.parse({"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "hola"}]})
    call = parser.parse({"type": "function_call", "function": {"name": "translate"},
                         "arguments": {"text": "hello"}})
    header = parser.parse({"id": "legacy-1", "timestamp": "2025-01-01T00:00:00Z",
                           "instructions": None})
    assert user.message is not None and user.message.content == "Translate"
    assert user.message.timestamp == "2025-09-10T12:00:00.000Z"
    assert item.message is not None and item.message.content == "hola"
    assert call.message is not None and call.message.tool_name == "translate"
    assert header.message is None and header.hints == {"external_id": "legacy-1"}


def test_codex_data_url_image_is_a_placeholder() -> None:
    """An input_image given as a data URL is stored as a placeholder with its size."""
    data = base64.b64encode(bytes(3000)).decode()
    payload = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}]}
    message = CodexParser().parse(_codex("response_item", payload)).message
    assert message is not None
    assert message.content == "look\n[image/png 3 KB]"


# -- Gemini CLI ----------------------------------------------------------------------------


def _gemini_doc(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"sessionId": "g-1", "projectHash": "ab", "messages": messages,
                         "startTime": "2025-10-18T14:57:28.974Z"})


def test_gemini_document_entries_become_rows() -> None:
    """Each entry of messages[] is a row; `gemini` is the assistant; ids become uuids."""
    document = parse_document(_gemini_doc([
        {"id": "m1", "type": "user", "content": "hi", "timestamp": "2025-10-18T14:57:28.974Z"},
        {"id": "m2", "type": "gemini", "content": "hello",
         "thoughts": [{"subject": "s", "description": "private"}]},
    ]))
    assert document.external_id == "g-1"
    rows = [(e.message.role, e.message.content, e.message.uuid) for e in document.entries]
    assert rows == [("user", "hi", "m1"), ("assistant", "hello", "m2")]
    assert "private" not in document.entries[1].message.content


def test_gemini_tool_calls_carry_their_results_as_text() -> None:
    """toolCalls inside a gemini message give a tool_call row with the tool output as text."""
    call = {"id": "c", "name": "list_directory", "args": {"path": "/p"},
            "result": [{"functionResponse": {"id": "c", "name": "list_directory",
                                             "response": {"output": "[DIR] src"}}}]}
    document = parse_document(_gemini_doc([{"id": "m", "type": "gemini", "content": "",
                                            "toolCalls": [call]}]))
    message = document.entries[0].message
    assert (message.kind, message.tool_name) == ("tool_call", "list_directory")
    assert "[DIR] src" in message.content


def test_a_gemini_user_entry_of_tool_answers_is_a_tool_result() -> None:
    """Gemini CLI 0.61 records the tools' answers it sends back as a "user" entry; the
    e2e found memoryd's own recall answer remembered as the person's request (32.8)."""
    answer = {"functionResponse": {"id": "c", "name": "mcp_memoryd_recall",
                                   "response": {"output": "- id 1 [score 0.000] x"}}}
    message = GeminiRecordParser().parse({"id": "u2", "type": "user", "content": [answer],
                                          "timestamp": "2026-11-25T22:52:11.391Z"}).message
    assert message is not None
    assert (message.role, message.kind, message.tool_name) == (
        "tool", "tool_result", "mcp_memoryd_recall")
    typed = GeminiRecordParser().parse({"id": "u3", "type": "user", "content": [
        {"text": "and this"}, answer]}).message
    assert typed is not None and typed.role == "user"


def test_gemini_document_that_is_not_json_raises_value_error() -> None:
    """A document caught mid-rewrite (not JSON) raises ValueError, for the tailer to wait."""
    with pytest.raises(ValueError):
        parse_document(b'{"sessionId": "g-1", "messa')


def test_gemini_jsonl_header_patch_and_message() -> None:
    """JSONL form: the header names the session, `$set` patches are skipped, messages are rows."""
    parser = GeminiRecordParser()
    assert parser.replaces_by_id
    header = parser.parse({"sessionId": "g-2", "projectHash": "h", "kind": "main"})
    patch = parser.parse({"$set": {"lastUpdated": "2026-04-29T21:39:33.156Z"}})
    message = parser.parse({"id": "g-user-1", "type": "user", "content": [{"text": "Say hi"}]})
    assert header.message is None and header.hints == {"external_id": "g-2"}
    assert patch.message is None
    assert message.message is not None
    assert (message.message.content, message.message.uuid) == ("Say hi", "g-user-1")


def test_gemini_epoch_seconds_timestamp() -> None:
    """An old-style numeric `ts` (epoch seconds) becomes an ISO UTC timestamp."""
    document = parse_document(orjson.dumps({"history": [
        {"role": "user", "parts": [{"text": "x"}], "ts": 1695000000}]}))
    assert document.entries[0].message.timestamp == "2023-09-18T01:20:00.000Z"


# -- shared helpers ------------------------------------------------------------------------


@pytest.fixture
def tokyo_time() -> Iterator[None]:
    """The process's local zone set to Asia/Tokyo for one test."""
    with local_time_zone("Asia/Tokyo"):
        yield


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-09-03T00:47:19.293Z", "2025-09-03T00:47:19.293Z"),
        ("2025-09-03T09:47:19.293+09:00", "2025-09-03T00:47:19.293Z"),
        ("2025-09-03T00:47:19", "2025-09-03T00:47:19.000Z"),
        (1695000000, "2023-09-18T01:20:00.000Z"),
        (1695000000123, "2023-09-18T01:20:00.123Z"),
        ("not a time", None),
        (None, None),
        (True, None),
    ],
)
def test_utc_timestamp_is_utc_whatever_the_local_zone(
    tokyo_time: None, value: object, expected: str | None
) -> None:
    """Timestamps normalise to UTC `...Z`; a zoneless one is read as UTC, not local time."""
    assert time.localtime(0).tm_gmtoff == 9 * 3600  # the zone really is not UTC
    assert utc_timestamp(value) == expected


def test_image_placeholder_sizes() -> None:
    """Placeholders give the decoded size in B, KB or MB and never the data."""
    assert image_placeholder("image/png", "A" * 4) == "[image/png 3 B]"
    assert image_placeholder("image/png", "A" * (84 * 1024 * 4 // 3)) == "[image/png 84 KB]"
    assert image_placeholder("image/png", "A" * (3 << 20)) == "[image/png 2.2 MB]"
    assert image_placeholder(None, None) == "[image]"


def test_gemini_summary_set_later_is_the_session_summary() -> None:
    """Gemini CLI writes a session's summary as a patch of its header once it is made
    (`{"$set": {"summary": ...}}`); other patches say nothing."""
    parser = GeminiRecordParser()
    assert parser.parse({"$set": {"summary": "Fix the flaky login test"}}).summary == (
        "summary", "Fix the flaky login test")
    assert parser.parse({"$set": {"lastUpdated": "2026-11-29T03:00:00.000Z"}}).summary is None
    assert parser.parse({"$set": {"messages": []}}).message is None


def test_gemini_rewind_names_the_message_it_goes_back_to() -> None:
    """`{"$rewindTo": id}` (Gemini CLI's `/rewind`) is no message: it names the first
    message the rewind discards."""
    outcome = GeminiRecordParser().parse({"$rewindTo": "m3"})
    assert outcome.message is None and outcome.rewind_to == "m3"
    assert GeminiRecordParser().parse({"$rewindTo": 7}).rewind_to is None
