"""Text an agent, an IDE or a hook put into a person's message: never their own words.

Claude Code wraps slash-command expansions, command output, reminders and IDE context
(`<ide_opened_file>`, `<ide_selection>`, `<ide_diagnostics>`) in tags; memoryd's own
block is `<memory_context>`. What a person asked is their message with all of these
taken out (`segments.turns_of`, `digest`).
"""

from __future__ import annotations

import re

INJECTED = re.compile(
    r"<(memory_context|hook_context|system-reminder|command-[a-z]+|local-command-stdout|"
    r"local-command-stderr|user-prompt-submit-hook|task-notification|bash-input|bash-stdout|"
    r"bash-stderr|ide_[a-z_]+)\b[^>]*>.*?</\1>",
    re.DOTALL | re.IGNORECASE)


#: memoryd's own block as Gemini CLI records it inside the user's message: HTML-escaped,
#: within its `<hook_context>` or as a part of its own.
ESCAPED_BLOCK = re.compile(r"&lt;memory_context&gt;.*?(?:&lt;/memory_context&gt;|\Z)",
                           re.DOTALL | re.IGNORECASE)


def without_injected(text: str) -> str:
    """`text` without anything an agent, an IDE or a hook put into it (memoryd's own
    blocks included, escaped or not)."""
    if "<" not in text and "&lt;" not in text:
        return text
    return ESCAPED_BLOCK.sub("", INJECTED.sub("", text))
