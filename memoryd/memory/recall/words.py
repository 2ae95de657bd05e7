"""Words that carry no meaning for search or relevance, shared by every backend and the gate."""

from __future__ import annotations

import re

STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "did", "do", "does", "for", "from",
    "had", "has", "have", "how", "i", "if", "in", "is", "it", "its", "me", "my", "no", "not",
    "of", "on", "or", "our", "s", "so", "t", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "why", "will", "with", "you", "your",
})


MAX_TERMS = 32

_WORD = re.compile(r"\w+", re.UNICODE)


def terms(text: str) -> list[str]:
    """The distinct words of `text`, lower-cased, stopwords dropped unless nothing else is left."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        seen.setdefault(word, None)
    words = list(seen)
    content = [w for w in words if w not in STOPWORDS]
    return (content or words)[:MAX_TERMS]
