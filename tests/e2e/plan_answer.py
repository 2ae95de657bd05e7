"""What the fake model servers answer a `PLAN` prompt with: a decision stated mid-way, then
(Claude Code, whose TaskCreate tool the request offers) two tasks recorded one call at a
time, then last words that are not the decision."""

from __future__ import annotations

import json
from typing import Any

PLAN = "PLAN "
DECIDED = ("Decision: we deploy staging before prod because of the migration order: "
           "0041_create_accounts must be applied on staging before 0042_add_ledger reaches prod.")
TASKS = ("Run make check-migrations against staging", "Write the rollback runbook for 0042")
DONE = "Both tasks are recorded; the pipeline file is next."
#: A one-question session's prompt: trivia that must not push the work out.
TRIVIA = "how do I squash the last three commits?"


def asks_to_plan(said: str) -> bool:
    """Whether the person's text asks for the plan (Gemini CLI puts the hook's block
    before it, on lines of its own)."""
    return any(line.strip().startswith(PLAN) for line in said.splitlines())


def plain_answer() -> str:
    """The answer of an agent given no task tool: the decision, then more words."""
    return f"{DECIDED}\n\n{DONE}"


#: The ids of the plan's calls: Claude Code defers TaskCreate, found first with ToolSearch.
SEARCH_ID = "toolu_search_task"
TASK_IDS = tuple(f"toolu_task_{n}" for n in range(1, len(TASKS) + 1))


def next_task(body: Any, answered: set[str]) -> tuple[str, str, dict[str, Any]] | None:
    """(call id, tool, input) of the plan's next call: ToolSearch for the deferred
    TaskCreate, then a TaskCreate a task; None when all are recorded, or when the request
    offers no way to TaskCreate."""
    names = {str(t.get("name", "")) for t in body.get("tools") or []} if isinstance(
        body, dict) else set()
    if "TaskCreate" not in names:
        if ("ToolSearch" in names and SEARCH_ID not in answered
                and "TaskCreate" in json.dumps(body)):
            return SEARCH_ID, "ToolSearch", {"query": "select:TaskCreate", "max_results": 1}
        return None
    for ident, subject in zip(TASK_IDS, TASKS, strict=True):
        if ident not in answered:
            return ident, "TaskCreate", {"subject": subject, "description": subject,
                                         "activeForm": subject}
    return None


def first_of_plan(answered: set[str]) -> bool:
    """Whether no call of the plan was answered yet: its first answer states the decision."""
    return not answered & {SEARCH_ID, *TASK_IDS}
