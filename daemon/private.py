"""`<private>…</private>`: what a person marks private is never kept, anywhere.

The convention users of other agent memories know: text typed between the tags
is masked in the daemon's own archive (a message's content and its raw line)
as soon as it is read, and so never reaches memory, vectors, context blocks or
a remote backend. An unclosed tag hides the rest of the text (of the JSON
string, in a raw line, so that the line stays valid JSON).
"""

from __future__ import annotations

import re

PLACEHOLDER = "[REDACTED:private]"
_TEXT = re.compile(r"(?is)<private>.*?(?:</private>|\Z)")
# Inside a JSON line: the span ends at its closing tag or, unclosed, before the string's
# closing quote (escaped characters skipped).
_RAW = re.compile(rb'(?is)<private>(?:[^"\\]|\\.)*?(?:</private>|(?="))')
# The test every line goes through: a search costs less than a lowered copy of the line.
_TAG = re.compile("<private>", re.IGNORECASE)
_RAW_TAG = re.compile(b"<private>", re.IGNORECASE)


def mask_private(text: str) -> str:
    """`text` with every `<private>` span replaced by PLACEHOLDER."""
    if _TAG.search(text) is None:
        return text
    return _TEXT.sub(PLACEHOLDER, text)


def mask_private_raw(raw: bytes) -> bytes:
    """The same for a raw JSON line, keeping it valid JSON."""
    if _RAW_TAG.search(raw) is None:
        return raw
    return _RAW.sub(PLACEHOLDER.encode(), raw)
