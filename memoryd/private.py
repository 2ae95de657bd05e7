"""`<private>…</private>`: what a person marks private is never kept, anywhere.

The convention users of other agent memories know: text typed between the tags
is masked in the daemon's own archive (a message's content and its raw line)
as soon as it is read, and so never reaches memory, vectors, context blocks or
a remote backend.

What counts as the tags, whatever an agent or a person writes: any case, spaces
inside (`< private >`, `</ private>`), attributes on the opening tag
(`<private reason="x">`); tags nest (the span ends where the outermost one
closes); an unclosed tag hides the rest of the text (of the JSON string, in a
raw line, so that the line stays valid JSON); a closing tag with no opening one
is left as it is. In a raw line a tag may also be written with JSON's escapes
(`\\u003cprivate\\u003e`, or a letter escaped: `<\\u0070rivate>`); a line whose tag
only its decoded strings show is written again decoded, then masked.
"""

from __future__ import annotations

import json
import re

PLACEHOLDER = "[REDACTED:private]"
_OPEN = r"<\s*private\b[^<>]*>"
_CLOSE = r"<\s*/\s*private\s*>"
_TAGS = re.compile(f"({_OPEN})|{_CLOSE}", re.IGNORECASE)
# The test every message goes through: the word, in a lowered copy (a C-speed scan; a
# case-insensitive regex search costs ten times as much), then the tag.
TAG = re.compile(r"<\s*/?\s*private\b", re.IGNORECASE)

# The same in a raw JSON line, where `<` and `>` may be escaped and a tag never spans a
# string's closing quote.
_LT, _GT = rb"(?:<|\\u003[cC])", rb"(?:>|\\u003[eE])"
_RAW_TAGS = re.compile(
    rb"(" + _LT + rb"\s*private\b(?:(?!" + _GT + rb")(?:\\.|[^<>\"\\]))*" + _GT + rb")|"
    + _LT + rb"\s*/\s*private\s*" + _GT, re.IGNORECASE)
# Two searches rather than one led by an alternation (which scans far slower).
_RAW_TAG = re.compile(rb"<\s*/?\s*private\b", re.IGNORECASE)
_RAW_ESCAPED_TAG = re.compile(rb"\\u003[cC]\s*/?\s*private\b", re.IGNORECASE)
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _spans(found: list[tuple[int, int, bool]], length: int) -> list[tuple[int, int]]:
    """The outermost private spans, from the tags found ((start, end, opening) in order);
    an unclosed one runs to `length`."""
    spans: list[tuple[int, int]] = []
    depth, start = 0, 0
    for tag_start, tag_end, opening in found:
        if opening:
            if depth == 0:
                start = tag_start
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                spans.append((start, tag_end))
    if depth:
        spans.append((start, length))
    return spans


def mask_private(text: str) -> str:
    """`text` with every `<private>` span replaced by PLACEHOLDER."""
    if "private" not in text.lower() or TAG.search(text) is None:
        return text
    found = [(m.start(), m.end(), m.group(1) is not None) for m in _TAGS.finditer(text)]
    spans = _spans(found, len(text))
    if not spans:
        return text
    parts, at = [], 0
    for start, end in spans:
        parts += [text[at:start], PLACEHOLDER]
        at = end
    parts.append(text[at:])
    return "".join(parts)


def _mask_literal(literal: bytes) -> bytes:
    inner = literal[1:-1]
    found = [(m.start(), m.end(), m.group(1) is not None) for m in _RAW_TAGS.finditer(inner)]
    spans = _spans(found, len(inner))
    if not spans:
        return literal
    parts, at = [b'"'], 0
    for start, end in spans:
        parts += [inner[at:start], PLACEHOLDER.encode()]
        at = end
    parts += [inner[at:], b'"']
    return b"".join(parts)


def may_hold_private(raw: bytes) -> bool:
    """Whether a raw line can hold a tag at all: the word, in any case (one C-speed scan;
    what is decoded from a line without it cannot hold one either)."""
    return b"private" in raw.lower()


def mask_private_raw(raw: bytes) -> bytes:
    """The same for a raw JSON line, span by span inside each string, so that the line
    stays valid JSON; `raw` itself when there is nothing to mask."""
    if not may_hold_private(raw) or (_RAW_TAG.search(raw) is None and (
            b"\\u003" not in raw or _RAW_ESCAPED_TAG.search(raw) is None)):
        return raw
    masked = _STRING.sub(lambda m: _mask_literal(m.group(0)), raw)
    return raw if masked == raw else masked


def mask_private_line(raw: bytes, decoded_held_one: bool) -> bytes:
    """`mask_private_raw`, and where that finds nothing though the line's decoded strings
    held a tag (`decoded_held_one`: a tag written with escaped letters), the line written
    again with its strings decoded, then masked; still valid JSON."""
    masked = mask_private_raw(raw)
    if masked != raw or not decoded_held_one:
        return masked
    try:
        plain = json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return masked
    return mask_private_raw(plain.encode("utf-8", "surrogatepass"))
