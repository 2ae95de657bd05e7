"""Memories people ask for in so many words: "remember that …" in a user's message. Pure.

When someone types "Remember that the staging database listens on port 5433"
to their agent, they mean it to outlive the session. Recovery saves every
message as conversation anyway; this also keeps each such request as a `fact`
memory of its own, so that it is recalled as a fact (high importance, no
decay) rather than as a line somewhere in a long segment.

Only an explicit request counts, at the start of a sentence (after optional
lead-ins such as "please", "also", "oh and", "btw", "hey", "ok", "note:"; see
`_LEAD`):
- "remember (that) …", "remember: …", "remember to …";
- "keep in mind (that) …", "bear in mind (that) …";
- "don't forget (that|to) …", "do not forget …";
- "from now on …", "for future reference …", "note for the future …".

What is never taken: messages the agent's tooling wrote in the user's name
(Claude Code's `isMeta` lines, stored as kind `injected`: slash-command and skill
prompts, caveats; a subagent's prompt, written by the model, `is_sidechain`;
Codex's AGENTS.md boilerplate; interruption notices); `<tag>…</tag>` blocks
anywhere in a message (command wrappers, `<system-reminder>`, an IDE's
`<ide_opened_file>`, `<environment_context>`), while the text typed around them
still counts; text inside code fences or quoted lines; sentences that are
questions ("remember that bug?"); and sentences where the cue is not the start
("I don't remember that", "do you remember …").

A memory's text is its sentence from the cue on, whitespace collapsed, at most
MAX_CHARS (longer ones are cut at a word and marked "…"); its provenance is the
message. Secrets are masked (`memory.privacy.redaction`) in the whole message before any
sentence is cut out of it, so that clipping cannot leave half a secret unmasked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memoryd.memory.privacy.redaction import redact
from memoryd.store.sessions import StoredMessage

MAX_CHARS = 500
#: A request hidden in a longer text is still found; past this the message is taken for
#: pasted material (logs, documents) rather than something typed to the agent.
MAX_MESSAGE_CHARS = 20_000

_LEAD = (r"(?:(?:please|and|also|oh,? and|btw|by the way|ok(?:ay)?|hey|one more thing|note)"
         r"[,:]?\s+)*")
_CUE = (
    r"(?:remember(?:\s+that\b|\s*:|\s+to\b|,)"
    r"|(?:keep|bear)\s+in\s+mind\b"
    r"|(?:don['\u2019]?t|do\s+not)\s+forget\b"
    r"|from\s+now\s+on\b"
    r"|for\s+future\s+reference\b"
    r"|note\s+for\s+the\s+future\b)"
)
_REQUEST = re.compile(rf"^{_LEAD}(?P<request>{_CUE}.*)$", re.IGNORECASE | re.DOTALL)
# A word every cue holds: a message without one is passed over before any masking.
_CUE_WORD = re.compile(r"remember|mind|forget|now\s+on|future", re.IGNORECASE)
# The same test for ASCII text, ten times faster on a long message (most have no cue).
_CUES = ("remember", "mind", "forget", "future")
_NOW_ON = re.compile(r"now\s+on")
# A sentence ends at . ! ? followed by a space or the end, or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_FENCE = re.compile(r"^\s*(```|~~~)")
# Markdown emphasis around the cue ("**Remember:** …"); `__main__` or `f(**kw)` further on
# is the user's text and stays.
_EMPHASIS_AFTER_CUE = re.compile(r"^([^*_]{1,40}?)(?:\*\*|__)(?=\s|$)")
_TAG_BLOCK = re.compile(r"<([A-Za-z][\w-]*)\b[^>]*>.*?</\1\s*>", re.DOTALL)
_INJECTED_PREFIXES = (
    "caveat:", "[request interrupted", "# agents.md", "this session is being continued",
)


@dataclass(frozen=True, slots=True)
class Request:
    """One "remember …" request: its text and the message it was made in."""

    text: str
    message: StoredMessage


def _typed_text(message: StoredMessage) -> str | None:
    """What the person typed in `message` (tag blocks taken out), or None if nothing."""
    if message.role != "user" or message.kind != "message" or message.is_sidechain:
        return None
    if len(message.content) > MAX_MESSAGE_CHARS:
        return None
    text = _TAG_BLOCK.sub("\n", message.content).strip()
    head = text[:40].lower()
    if not text or head.startswith(_INJECTED_PREFIXES) or text.startswith("<"):
        return None  # empty once the tags are out, boilerplate, or an unclosed tag
    return text


def _prose_lines(text: str) -> Iterable[str]:
    """The lines of `text` outside code fences and quotes."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and not line.lstrip().startswith(">"):
            yield line


def _clip(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    cut = text.rfind(" ", 0, MAX_CHARS - 1)
    return text[:cut if cut > MAX_CHARS // 2 else MAX_CHARS - 1].rstrip(" ,;:") + "…"


def _has_cue(text: str) -> bool:
    if not text.isascii():  # Unicode case folding: the regular expression decides
        return _CUE_WORD.search(text) is not None
    lowered = text.lower()
    return any(cue in lowered for cue in _CUES) or (
        "now" in lowered and _NOW_ON.search(lowered) is not None)


def requests_in(message: StoredMessage) -> list[str]:
    """The texts of the "remember …" requests in one message, in order, each once."""
    typed = _typed_text(message)
    if typed is None or not _has_cue(typed):
        return []
    found: dict[str, None] = {}
    for line in _prose_lines(redact(typed)):
        for sentence in _SENTENCE_END.split(line):
            # Markdown list markers and emphasis are not part of the sentence.
            sentence = sentence.strip().lstrip("-•").strip().strip("*_").strip()
            match = _REQUEST.match(sentence)
            if match is None or sentence.endswith("?"):
                continue
            text = _EMPHASIS_AFTER_CUE.sub(r"\1", " ".join(match["request"].split()))
            # A bare cue ("Remember that.", "From now on!") holds nothing to keep.
            if len(text.split()) >= 4:
                found.setdefault(_clip(text), None)
    return list(found)


def extract_requests(messages: Iterable[StoredMessage]) -> list[Request]:
    """Every "remember …" request in `messages`, in message order."""
    return [Request(text, message) for message in messages for text in requests_in(message)]
