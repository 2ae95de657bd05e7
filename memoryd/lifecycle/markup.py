"""Text an agent, an IDE or a hook put into a person's message: never their own words.

Claude Code wraps slash-command expansions, command output, reminders and IDE context
(`<ide_opened_file>`, `<ide_selection>`, `<ide_diagnostics>`) in tags; memoryd's own
block is `<memory_context>`. What a person asked is their message with all of these
taken out (`segments.turns_of`, `digest`). What a CLI writes in the agent's name when
the model's API failed is not the agent's words either (`api_error_text`).
"""

from __future__ import annotations

import re

import orjson

INJECTED = re.compile(
    r"<(memory_context|hook_context|system-reminder|command-[a-z]+|local-command-stdout|"
    r"local-command-stderr|user-prompt-submit-hook|task-notification|bash-input|bash-stdout|"
    r"bash-stderr|user_action|ide_[a-z_]+)\b[^>]*>.*?</\1>",
    re.DOTALL | re.IGNORECASE)


#: memoryd's own block as Gemini CLI records it inside the user's message: HTML-escaped,
#: within its `<hook_context>` or as a part of its own.
ESCAPED_BLOCK = re.compile(r"&lt;memory_context&gt;.*?(?:&lt;/memory_context&gt;|\Z)",
                           re.DOTALL | re.IGNORECASE)


#: The line Claude Code writes after a background task's `<task-notification>`, in the
#: person's name: "Read the output file to retrieve the result: /tmp/claude-1000/...".
TASK_OUTPUT = re.compile(r"^Read the output file to retrieve the result:[^\n]*\n?", re.M)


def without_injected(text: str) -> str:
    """`text` without anything an agent, an IDE or a hook put into it (memoryd's own
    blocks included, escaped or not)."""
    if "<" not in text and "&lt;" not in text:
        return text
    text = ESCAPED_BLOCK.sub("", INJECTED.sub("", text))
    if "Read the output file" in text:
        text = TASK_OUTPUT.sub("", text)
    return text


#: What Claude Code writes in the agent's name, as model `<synthetic>`, when no model was
#: asked (after a local command): never what a session concluded.
SYNTHETIC_REPLIES = frozenset({"No response requested."})


_API_ERROR = re.compile(r"^(API Error: \d+) (\{.*\})\s*$", re.S)


def api_error_text(text: str) -> str:
    """An API error's first line, its JSON body read ('API Error: 400 invalid_request_error:
    messages.136: ...') rather than quoted."""
    found = _API_ERROR.match(text.strip())
    try:
        body = orjson.loads(found.group(2)) if found else None
    except orjson.JSONDecodeError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if found and isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type")
        return f"{found.group(1)} {kind + ': ' if isinstance(kind, str) else ''}{error['message']}"
    return text.strip().split("\n", 1)[0]
