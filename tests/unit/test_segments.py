"""Cutting unsynced messages into conversation segments."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from memoryd.lifecycle.segments import plan_segments, quiet_line, render_message
from memoryd.store.sessions import StoredMessage

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def msg(index: int, *, kind: str = "message", role: str = "user", content: str = "hello",
        minutes: float | None = None) -> StoredMessage:
    stamp = T0 + timedelta(minutes=index if minutes is None else minutes)
    return StoredMessage(index=index, role=role, kind=kind, content=content, tool_name=None,
                         uuid=f"u{index}", timestamp=stamp)


def test_compaction_boundary_closes_what_came_before() -> None:
    """Messages before a compaction boundary form a closed segment of their own."""
    messages = [msg(0), msg(1), msg(2, kind="compact_boundary", role="system"), msg(3)]
    plans = plan_segments(messages, max_chars=10_000, idle_gap=timedelta(hours=1))
    assert [(p.first_index, p.last_index, p.closed) for p in plans] == [
        (0, 1, True), (2, 3, False)]


def test_idle_gap_cuts() -> None:
    """A gap longer than idle_gap between two messages starts a new segment."""
    messages = [msg(0, minutes=0), msg(1, minutes=5), msg(2, minutes=200), msg(3, minutes=201)]
    plans = plan_segments(messages, max_chars=10_000, idle_gap=timedelta(minutes=30))
    assert [(p.first_index, p.last_index) for p in plans] == [(0, 1), (2, 3)]


def test_size_bound_cuts() -> None:
    """No segment's text grows past max_chars unless one message alone is bigger."""
    messages = [msg(i, content="x" * 90) for i in range(20)]
    plans = plan_segments(messages, max_chars=500, idle_gap=timedelta(hours=1))
    assert len(plans) > 1
    assert all(len(p.text) <= 500 for p in plans)


def test_tool_noise_is_clipped_but_provenance_kept() -> None:
    """Huge tool output and base64 stay out of the text; the range still covers the message."""
    noise = "A" * 50_000
    messages = [msg(0, content="run the tests"),
                msg(1, role="tool", kind="tool_result", content="ok " + noise)]
    [plan] = plan_segments(messages, max_chars=100_000, idle_gap=timedelta(hours=1))
    assert "AAAA" * 100 not in plan.text
    assert (plan.first_index, plan.last_index) == (0, 1)
    # A result that worked is not memory text at all; one that failed is its first line.
    assert render_message(messages[1]) == ""
    failed = msg(2, role="tool", kind="tool_result",
                 content="[tool error] Exit code 1\nmix test: 2 failures\n" + noise)
    assert render_message(failed) == "tool failed: mix test: 2 failures"


@given(
    kinds=st.lists(st.sampled_from(["message", "message", "tool_result", "compact_boundary"]),
                   min_size=1, max_size=60),
    sizes=st.lists(st.integers(0, 400), min_size=60, max_size=60),
    gaps=st.lists(st.integers(0, 120), min_size=60, max_size=60),
    max_chars=st.integers(100, 3000),
)
def test_segments_partition_the_messages(kinds: list[str], sizes: list[int], gaps: list[int],
                                         max_chars: int) -> None:
    """Every message lies in exactly one segment, in order; only the last is open."""
    minute = 0
    messages = []
    for i, kind in enumerate(kinds):
        minute += gaps[i]
        messages.append(msg(i, kind=kind, content="w" * sizes[i], minutes=minute))
    plans = plan_segments(messages, max_chars=max_chars, idle_gap=timedelta(minutes=60))
    covered = [m.index for p in plans for m in p.messages]
    assert covered == list(range(len(messages)))
    assert [p.closed for p in plans] == [True] * (len(plans) - 1) + [False]
    for plan in plans[1:]:
        assert plan.messages[0].kind == "compact_boundary" or len(plan.messages) >= 1
    for plan in plans:
        assert all(m.kind != "compact_boundary" for m in plan.messages[1:])


def test_thinking_is_clipped() -> None:
    """Reasoning blocks keep only their start in the memory text."""
    thought = msg(0, role="assistant", kind="thinking", content="[thinking] " + "why " * 500)
    assert len(render_message(thought)) < 400


def test_a_thought_is_said_once() -> None:
    """The line says it is a thought; the parser's tag on each block is not repeated in
    memory text (it filled prompt blocks with `thought: [thinking]`)."""
    thought = msg(0, role="assistant", kind="thinking",
                  content="[thinking] check the timer\n[thinking] then the button")
    assert render_message(thought) == "assistant thought: check the timer\nthen the button"
    redacted = msg(1, role="assistant", kind="thinking", content="[redacted thinking]")
    assert render_message(redacted) == "assistant thought: [redacted thinking]"


_PIECES = st.sampled_from([
    "deploy the api", "API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz012345", "\n\n\n\n",
    "<system-reminder>be brief</system-reminder>", "mail ops@example.com", "  ",
    "QUJD" * 60, "x" * 900, "call +1 415 555 0100", "<private>pin 2468</private>",
])


@given(st.lists(st.tuples(
    st.sampled_from([("user", "message"), ("assistant", "message"), ("model", "message"),
                     ("assistant", "thinking"), ("tool", "tool_result"), ("system", "message")]),
    st.lists(_PIECES, min_size=1, max_size=8)), min_size=1, max_size=12))
def test_plans_carry_the_turns_of_their_messages(
        specs: list[tuple[tuple[str, str], list[str]]]) -> None:
    """Each plan's turns are exactly `turns_of` its messages (masked the same way), and
    every line is its message rendered, though a turn and its line share one masking."""
    from memoryd.lifecycle.segments import turns_of

    messages = [msg(i, role=role, kind=kind, content=" ".join(parts))
                for i, ((role, kind), parts) in enumerate(specs)]
    plans = plan_segments(messages, max_chars=1500, idle_gap=timedelta(hours=1))
    for plan in plans:
        assert plan.turns == turns_of(plan.messages)
        lines = [line for m in plan.messages if (line := render_message(m))]
        assert plan.text == ("\n".join(lines) if lines else quiet_line(plan.messages))
        assert "sk-proj-abcdefghij" not in plan.text + "".join(t.text for t in plan.turns)


def test_a_tool_call_is_one_compact_line_never_its_input() -> None:
    """Edit, Bash and Read calls of Claude Code, Codex's shell and apply_patch and Gemini's
    calls each read as one short line naming the file or the command (31.2), the path
    relative to the project; the old string, the new string and the file body do not
    appear."""
    body = "defmodule Shop.Cart do\n  def total(items), do: Enum.sum(items)\nend\n" * 20
    edit = json.dumps({"file_path": "/home/ana/shop/lib/cart.ex", "old_string": body,
                       "new_string": body + "# changed", "replace_all": False})
    calls = [
        StoredMessage(0, "assistant", "tool_call", f"[tool_use Edit] {edit[:2000]}", "Edit",
                      "u0", T0, tool_input=edit),
        StoredMessage(1, "assistant", "tool_call", "[tool_use Edit] " + edit[:300], "Edit",
                      "u1", T0),  # the input cut short: found in the text
        StoredMessage(2, "assistant", "tool_call", "[tool_call shell] {...}", "shell", "u2", T0,
                      tool_input=json.dumps({"command": ["bash", "-lc", "mix test --trace"]})),
        StoredMessage(3, "assistant", "tool_call", "[tool_call apply_patch] ...", "apply_patch",
                      "u3", T0, tool_input="*** Begin Patch\n*** Update File: lib/a.ex\n@@\n"
                      "-x\n+y\n*** End Patch"),
        StoredMessage(4, "assistant", "tool_call", "Let me look.\n[tool_call read_file] {}",
                      "read_file", "u4", T0, tool_input=json.dumps(
                          [{"name": "read_file", "args": {"absolute_path": "/home/ana/shop/x.md"}},
                           {"name": "run_shell_command", "args": {"command": "npm test"}}])),
    ]
    lines = [render_message(m, "/home/ana/shop") for m in calls]
    assert lines == [
        "assistant used Edit lib/cart.ex",
        "assistant used Edit lib/cart.ex",
        "assistant used shell: mix test --trace",
        "assistant used apply_patch lib/a.ex",
        "assistant: Let me look.\nassistant used read_file x.md; run_shell_command: npm test",
    ]
    assert not any("defmodule" in line or "{" in line for line in lines)


def test_tool_results_that_worked_still_lie_in_a_segment() -> None:
    """They give no line of their own, yet every message lies in one segment: after an
    idle gap they join the next segment, and a tail of nothing else says what it holds."""
    ok = [msg(i, role="tool", kind="tool_result", content="ok", minutes=i) for i in range(3)]
    later = msg(3, content="next task", minutes=300)
    plans = plan_segments([*ok, later], max_chars=10_000, idle_gap=timedelta(minutes=30))
    assert [(p.first_index, p.last_index) for p in plans] == [(0, 3)]
    assert plans[0].text == "user: next task"
    [tail] = plan_segments(ok, max_chars=10_000, idle_gap=timedelta(minutes=30))
    assert (tail.first_index, tail.last_index, tail.text) == (0, 2, "tool results: 3 succeeded")


def test_memoryds_own_blocks_and_tool_answers_never_become_memory_text() -> None:
    """Gemini CLI records the hook's block inside the user's message, escaped and wrapped
    in `<hook_context>` (issue 32.1): memory keeps only what the person typed, so the
    blocks do not nest session after session. An MCP recall's answer (memoryd's own,
    32.8) is not memory text either."""
    block = ("<hook_context>&lt;memory_context&gt;\nThe following is reference data …\n"
             "- [2026-11-20 conversation] user: the rate limit is 900/min\n"
             "&lt;/memory_context&gt;</hook_context>")
    said = msg(0, content=f"{block}\nwhat is the rate limit for bulk calls?")
    assert render_message(said) == "user: what is the rate limit for bulk calls?"
    only = msg(1, content=block)
    assert render_message(only) == ""
    answer = msg(2, role="tool", kind="tool_result",
                 content='{"result": "- id 139855e3 user: what is the rate limit…"}')
    assert render_message(answer) == ""
    [plan] = plan_segments([said, only, answer], max_chars=10_000,
                           idle_gap=timedelta(hours=1))
    assert "memory_context" not in plan.text and "900/min" not in plan.text
